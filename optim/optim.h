// gradsleuth::optim: optimizers, schedulers, clipping, the training loop.
#pragma once
#include "optim/optimizer.h"
