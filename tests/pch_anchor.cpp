// The one source of gs_test_pch, the target that precompiles cmake/pch_tests.h for every doctest
// program (tests/CMakeLists.txt); it defines nothing.
