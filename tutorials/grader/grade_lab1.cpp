// The grader of lab 1 (tensors, views, strides, broadcasting). The library's own
// views (transpose, narrow, expand, contiguous) are the answer key: each case
// compares the student's geometry (shape, strides, offset, shared storage) and
// values against them.
#include "tutorials/grader/grader.h"
#include "tutorials/grader/labs.h"
#include "tutorials/lab1_tensors/lab1.h"

#include "core/ops.h"

namespace gradsleuth::labs {

namespace {

// 0, 1, 2, ... as float32 with the given shape: every element shows its own position.
Tensor ar(const Shape& s) { return arange(static_cast<double>(numel_of(s))).view(s); }
// The same with a shape of the same kind as `s` (vary(): `s` itself with the public inputs).
Tensor av(const Shape& s) { return ar(vary(s)); }

// `got` must be a view of `base` with exactly the geometry and values of `want`.
// The geometry is compared first (it reads no memory), the values last, after
// require_close has checked that every element lies inside the storage.
void require_view(Check& c, const Tensor& got, const Tensor& want, const Tensor& base, const std::string& what) {
  c.require(got.defined(), what + " returned an undefined Tensor");
  c.require_dims(got.shape(), want.shape(), what + " shape");
  c.require(got.storage() == base.storage(),
            what + " does not share the input's storage: a view must not copy (build it with detail::make_alias)");
  c.require_dims(got.strides(), want.strides(), what + " strides");
  c.require_eq(got.offset(), want.offset(), what + " offset");
  c.require_close(got, want, what + " values", 0.0, 0.0);
}

// Every index of t, in row-major order.
std::vector<std::vector<int64_t>> all_indices(const Tensor& t) {
  std::vector<std::vector<int64_t>> out;
  for (int64_t k = 0; k < t.numel(); ++k) out.push_back(unravel(k, t.shape()));
  return out;
}

Case strides_case(const Shape& public_shape) {
  return {"shape " + shape_str(public_shape), [public_shape](Check& c) {
            const Shape s = vary(public_shape);
            c.input("shape " + shape_str(s));
            c.require_dims(lab1::contiguous_strides(s), gs::contiguous_strides(s), "strides");
          }};
}

// storage_index on every element of t, against offset + sum index * stride.
Case storage_index_case(const std::string& name, std::function<Tensor()> make) {
  return {name, [name, make](Check& c) {
            const Tensor t = make();
            c.input("t = " + describe(t));
            for (const auto& idx : all_indices(t)) {
              int64_t want = t.offset();
              for (int64_t d = 0; d < t.dim(); ++d) want += idx[d] * t.stride(d);
              c.require_eq(lab1::storage_index(t, idx), want, "storage_index at " + coords_str(idx));
            }
          }};
}

Case transpose_case(const std::string& name, std::function<Tensor()> make, int64_t d0, int64_t d1) {
  return {name, [=](Check& c) {
            const Tensor t = make();
            c.input("t = " + describe(t) + ", d0 = " + std::to_string(d0) + ", d1 = " + std::to_string(d1));
            require_view(c, lab1::transpose_view(t, d0, d1), t.transpose(d0, d1), t, "transpose_view");
          }};
}

Case narrow_case(const std::string& name, std::function<Tensor()> make, int64_t dim, int64_t start, int64_t len) {
  return {name, [=](Check& c) {
            const Tensor t = make();
            c.input("t = " + describe(t) + ", dim " + std::to_string(dim) + ", start " + std::to_string(start) +
                    ", length " + std::to_string(len));
            require_view(c, lab1::narrow_view(t, dim, start, len), t.narrow(dim, start, len), t, "narrow_view");
          }};
}

Case copy_case(const std::string& name, std::function<Tensor()> make) {
  return {name, [=](Check& c) {
            const Tensor t = make();
            c.input("t = " + describe(t));
            const Tensor got = lab1::contiguous_copy(t);
            c.require_tensor(got, t.shape(), "contiguous_copy");
            c.require(got.dtype() == kFloat32, "contiguous_copy: expected float32, got " + got.str());
            c.require(got.storage() != t.storage(),
                      "contiguous_copy returned a tensor that shares the input's storage: it must copy");
            c.require(got.is_contiguous(), "contiguous_copy: the result is not contiguous (strides " +
                                               shape_str(got.strides()) + ", expected " +
                                               shape_str(gs::contiguous_strides(t.shape())) + ")");
            c.require_close(got, t.contiguous(), "contiguous_copy values", 0.0, 0.0);
          }};
}

Case broadcast_shape_case(const Shape& public_a, const Shape& public_b) {
  const std::string name = shape_str(public_a) + " and " + shape_str(public_b);
  return {name, [=](Check& c) {
            const Shape a = vary(public_a), b = vary(public_b);
            c.input("a = " + shape_str(a) + ", b = " + shape_str(b));
            c.require_dims(lab1::broadcast_shape(a, b), gs::broadcast_shapes(a, b, "grader"), "broadcast shape");
            c.require_dims(lab1::broadcast_shape(b, a), gs::broadcast_shapes(b, a, "grader"),
                           "broadcast shape with a and b swapped");
          }};
}

Case broadcast_shape_error_case(const Shape& public_a, const Shape& public_b) {
  const std::string name = shape_str(public_a) + " and " + shape_str(public_b) + " do not broadcast";
  return {name, [=](Check& c) {
            const Shape a = vary(public_a), b = vary(public_b);
            c.input("a = " + shape_str(a) + ", b = " + shape_str(b));
            c.require_throws([&] { lab1::broadcast_shape(a, b); }, "broadcast_shape");
          }};
}

Case broadcast_to_case(const std::string& name, std::function<Tensor()> make, const Shape& public_shape) {
  return {name, [=](Check& c) {
            const Tensor t = make();
            const Shape shape = vary(public_shape);
            c.input("t = " + describe(t) + ", shape " + shape_str(shape));
            require_view(c, lab1::broadcast_to(t, shape), t.expand(shape), t, "broadcast_to");
          }};
}

}  // namespace

Lab make_lab1() {
  Lab lab;
  lab.number = 1;
  lab.dir = "lab1_tensors";
  lab.title = "Tensors, views, strides and broadcasting";
  lab.starter = "tutorials/lab1_tensors/lab1.cpp";

  lab.tasks.push_back({1,
                       "row-major strides",
                       10,
                       "contiguous_strides()",
                       {strides_case({2, 3, 4}), strides_case({5}), strides_case({}), strides_case({3, 1, 2}),
                        strides_case({1, 1}), strides_case({4, 5, 6, 7})}});

  lab.tasks.push_back(
      {2,
       "the storage position of an element",
       10,
       "storage_index()",
       {storage_index_case("contiguous (2, 3, 4)",
                           [] {
                             return av({2, 3, 4});
                           }),
        storage_index_case("transposed (3, 4) -> (4, 3)",
                           [] {
                             return av({3, 4}).t();
                           }),
        storage_index_case("narrowed (4, 5) -> (2, 3), offset 7",
                           [] {
                             return av({4, 5}).narrow(0, 1, 2).narrow(1, 2, 3);
                           }),
        storage_index_case("expanded (3, 1) -> (3, 4), stride 0",
                           [] {
                             return av({3, 1}).expand(vary(Shape{3, 4}));
                           }),
        storage_index_case("0-dim scalar", [] { return scalar_tensor(5.0); }),
        {"an index of the wrong length throws",
         [](Check& c) {
           c.input("t (2, 3), index (1)");
           c.require_throws([] { lab1::storage_index(ar({2, 3}), {1}); }, "storage_index with 1 entry for 2 dims");
         }},
        {"an index out of range throws", [](Check& c) {
           c.input("t (2, 3), index (0, 3) and (-1, 0)");
           c.require_throws([] { lab1::storage_index(ar({2, 3}), {0, 3}); }, "storage_index (0, 3) on shape (2, 3)");
           c.require_throws([] { lab1::storage_index(ar({2, 3}), {-1, 0}); }, "storage_index (-1, 0)");
         }}}});

  lab.tasks.push_back(
      {3,
       "transpose as a view",
       15,
       "transpose_view()",
       {transpose_case(
            "(2, 3), swap 0 and 1",
            [] {
              return av({2, 3});
            },
            0, 1),
        transpose_case(
            "(2, 3, 4), swap 0 and 2",
            [] {
              return av({2, 3, 4});
            },
            0, 2),
        transpose_case(
            "(2, 3, 4), swap 2 and 1",
            [] {
              return av({2, 3, 4});
            },
            2, 1),
        transpose_case(
            "a narrowed (offset 5) tensor",
            [] {
              return av({4, 5}).narrow(0, 1, 3);
            },
            0, 1),
        transpose_case(
            "a dim with itself",
            [] {
              return av({2, 3});
            },
            1, 1),
        {"a write through the view shows in the original", [](Check& c) {
           Tensor t = ar({2, 3});
           c.input("t = arange(6).view(2, 3); v = transpose_view(t, 0, 1); v[2] = -1 (v's row 2 is t's column 2)");
           Tensor v = lab1::transpose_view(t, 0, 1);
           require_view(c, v, t.transpose(0, 1), t, "transpose_view");
           v.select(0, 2).fill_(-1.0);
           c.require_close(t, tensor({0, 1, -1, 3, 4, -1}, {2, 3}), "t after writing v[2]", 0.0, 0.0);
         }}}});

  lab.tasks.push_back(
      {4,
       "narrow as a view",
       15,
       "narrow_view()",
       {narrow_case(
            "(3, 4), dim 1, start 1, length 2",
            [] {
              return av({3, 4});
            },
            1, 1, 2),
        narrow_case(
            "(3, 4), dim 0, start 1, length 2",
            [] {
              return av({3, 4});
            },
            0, 1, 2),
        narrow_case(
            "(2, 3, 4), dim 2, start 3, length 1",
            [] {
              return av({2, 3, 4});
            },
            2, 3, 1),
        narrow_case(
            "a transposed (5, 4) tensor, dim 0, start 2, length 3",
            [] {
              return av({4, 5}).t();
            },
            0, 2, 3),
        narrow_case(
            "a narrowed tensor, narrowed again",
            [] {
              return av({6, 4}).narrow(0, 2, 4);
            },
            0, 1, 2),
        {"out of range throws",
         [](Check& c) {
           c.input("t (3, 4): dim 1 start 3 length 2; dim 0 start -1 length 1");
           c.require_throws([] { lab1::narrow_view(ar({3, 4}), 1, 3, 2); }, "narrow_view past the end");
           c.require_throws([] { lab1::narrow_view(ar({3, 4}), 0, -1, 1); }, "narrow_view with start -1");
         }},
        {"a write through the view shows in the original", [](Check& c) {
           Tensor t = ar({3, 4});
           c.input("t = arange(12).view(3, 4); v = narrow_view(t, 1, 1, 2); v.fill_(-1)");
           Tensor v = lab1::narrow_view(t, 1, 1, 2);
           require_view(c, v, t.narrow(1, 1, 2), t, "narrow_view");
           v.fill_(-1.0);
           c.require_close(t, tensor({0, -1, -1, 3, 4, -1, -1, 7, 8, -1, -1, 11}, {3, 4}), "t after v.fill_(-1)", 0.0,
                           0.0);
         }}}});

  lab.tasks.push_back({5,
                       "a contiguous copy, element by element",
                       20,
                       "contiguous_copy()",
                       {copy_case("contiguous (2, 3)",
                                  [] {
                                    return av({2, 3});
                                  }),
                        copy_case("transposed (3, 4) -> (4, 3)",
                                  [] {
                                    return av({3, 4}).t();
                                  }),
                        copy_case("narrowed and permuted (3, 4, 5) -> (5, 2, 3), offset 5",
                                  [] {
                                    return av({3, 4, 5}).narrow(1, 1, 2).permute({2, 1, 0});
                                  }),
                        copy_case("expanded (3, 1) -> (3, 4), stride 0",
                                  [] {
                                    return av({3, 1}).expand(vary(Shape{3, 4}));
                                  }),
                        copy_case("0-dim scalar", [] { return scalar_tensor(3.5); }), copy_case("empty (0, 3)", [] {
                          return zeros(vary({0, 3}));
                        })}});

  lab.tasks.push_back(
      {6,
       "the broadcast shape",
       15,
       "broadcast_shape()",
       {broadcast_shape_case({3, 1}, {1, 4}), broadcast_shape_case({2, 3, 4}, {4}), broadcast_shape_case({}, {2, 2}),
        broadcast_shape_case({5, 1, 3}, {4, 1}), broadcast_shape_case({1}, {1}),
        broadcast_shape_case({2, 1, 1}, {3, 1}), broadcast_shape_error_case({2, 3}, {3, 2}),
        broadcast_shape_error_case({3}, {4}), broadcast_shape_error_case({2, 3, 4}, {2, 4})}});

  lab.tasks.push_back(
      {7,
       "broadcasting as a view (stride 0)",
       15,
       "broadcast_to()",
       {broadcast_to_case("(3, 1) -> (3, 4)",
                          [] {
                            return av({3, 1});
                          },
                          {3, 4}),
        broadcast_to_case("(3) -> (2, 3)", [] { return av({3}); }, {2, 3}),
        broadcast_to_case("0-dim -> (2, 2)", [] { return scalar_tensor(7.0); }, {2, 2}),
        broadcast_to_case("transposed (3, 2) -> (4, 3, 2)",
                          [] {
                            return av({2, 3}).t();
                          },
                          {4, 3, 2}),
        broadcast_to_case("(2, 1, 3) -> (2, 5, 3), narrowed input (offset 3)",
                          [] {
                            return av({4, 1, 3}).narrow(0, 1, vary(2));
                          },
                          {2, 5, 3}),
        broadcast_to_case("(2, 3) -> (2, 3), nothing to do",
                          [] {
                            return av({2, 3});
                          },
                          {2, 3}),
        {"shapes that do not broadcast throw", [](Check& c) {
           c.input("(3) -> (4); (2, 3) -> (3); (2, 3) -> (2, 1)");
           c.require_throws([] { lab1::broadcast_to(ar({3}), {4}); }, "broadcast_to (3) -> (4)");
           c.require_throws([] { lab1::broadcast_to(ar({2, 3}), {3}); }, "broadcast_to (2, 3) -> (3)");
           c.require_throws([] { lab1::broadcast_to(ar({2, 3}), {2, 1}); }, "broadcast_to (2, 3) -> (2, 1)");
         }}}});
  return lab;
}

}  // namespace gradsleuth::labs
