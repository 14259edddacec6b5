// cuda/emu/device_launch_parameters.h: forwards to the emulator cuda_runtime.h.
#pragma once
#include "cuda/emu/cuda_runtime.h"
