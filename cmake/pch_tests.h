// Precompiled for the doctest programs in tests/ (cmake/precompile.cmake): doctest and the headers of
// debug/ and cli/'s set. One precompiled header serves every test program (REUSE_FROM gs_test_pch).
#pragma once
#include <doctest/doctest.h>

#include "cmake/pch_debug.h"
