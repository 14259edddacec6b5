// gradsleuth::dist: data-parallel training over MPI (docs/distributed.md).
#pragma once
#include "dist/ddp.h"
#include "dist/process_group.h"
#include "dist/sampler.h"
