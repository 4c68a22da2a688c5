#include "autograd/ops/broadcast.h"

namespace hyb {

Shape broadcast_shapes(const char* op, const Shape& a, const Shape& b) {
  const size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    // Walk from the last dimension; a missing leading dimension acts as 1.
    const int64_t da = i < a.size() ? a[a.size() - 1 - i] : 1;
    const int64_t db = i < b.size() ? b[b.size() - 1 - i] : 1;
    HYB_CHECK(da == db || da == 1 || db == 1, op, ": cannot broadcast a ", shape_str(a), " with b ", shape_str(b),
              " (dimension ", int64_t(n - 1 - i), " of the result: ", da, " vs ", db, ")");
    out[n - 1 - i] = da == 1 ? db : da;
  }
  return out;
}

bool broadcasts_to(const Shape& from, const Shape& to) {
  if (from.size() > to.size()) return false;
  const size_t lead = to.size() - from.size();
  for (size_t i = 0; i < from.size(); ++i)
    if (from[i] != to[lead + i] && from[i] != 1) return false;
  return true;
}

Tensor expand_view(const Tensor& t, const Shape& to, const char* op) {
  HYB_CHECK(broadcasts_to(t.shape(), to), op, ": cannot expand ", shape_str(t.shape()), " to ", shape_str(to),
            "; each dimension must match or be 1, and new dimensions go in front");
  if (t.shape() == to) return t;
  const size_t lead = to.size() - size_t(t.dim());
  Shape strides(to.size(), 0);
  for (size_t i = 0; i < size_t(t.dim()); ++i)
    strides[lead + i] = t.shape()[i] == to[lead + i] ? t.strides()[i] : 0;
  return t.as_strided(to, strides, t.offset());
}

}  // namespace hyb
