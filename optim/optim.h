// gradsleuth::optim: optimizers, schedulers, clipping, the training loop.
#pragma once
#include "optim/adam.h"
#include "optim/clip.h"
#include "optim/grad_scaler.h"
#include "optim/optimizer.h"
#include "optim/rmsprop.h"
#include "optim/scheduler.h"
#include "optim/sgd.h"
#include "optim/trainer.h"
