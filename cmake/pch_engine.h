// Precompiled for core/, nn/ and optim/ (cmake/precompile.cmake): the standard headers and the engine's
// headers that nearly every file there includes. Parsed once per target instead of once per file.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "core/autograd.h"
#include "core/error.h"
#include "core/format.h"
#include "core/ops.h"
#include "core/tensor.h"
