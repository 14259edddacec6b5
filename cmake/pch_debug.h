// Precompiled for debug/ and cli/ (cmake/precompile.cmake): the standard headers, the engine, nn,
// optim and the checks' common headers, which nearly every file there includes.
#pragma once
#include "cmake/pch_engine.h"

#include <chrono>
#include <cstdio>
#include <exception>
#include <iostream>
#include <set>
#include <tuple>
#include <unordered_map>

#include "core/generator.h"
#include "core/json.h"
#include "nn/module.h"
#include "nn/loss.h"
#include "optim/optimizer.h"
#include "debug/checks/check_util.h"
#include "debug/checks/run_check.h"
#include "debug/evidence/catalogue.h"
#include "debug/evidence/tensor_stats.h"
