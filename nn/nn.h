// gradsleuth::nn: everything for building and training models.
#pragma once
#include "nn/module.h"
