// gradsleuth::dist: data-parallel training over MPI (docs/distributed.md).
#pragma once
#include "distributed/ddp.h"
#include "distributed/process_group.h"
#include "distributed/sampler.h"
