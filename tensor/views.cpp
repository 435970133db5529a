#include <mvgpt/tensor/views.h>

#include <numeric>
#include <string>

namespace mvgpt::views {

using std::to_string;

Shape infer_shape(const Shape& shape, int64_t n, const char* op) {
  Shape out = shape;
  int infer = -1;
  int64_t known = 1;
  for (int i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      if (infer >= 0) throw std::invalid_argument(std::string(op) + ": only one dimension can be -1 in " + mvgpt::to_string(shape));
      infer = i;
    } else if (shape[i] < 0) {
      throw std::invalid_argument(std::string(op) + ": negative dimension in " + mvgpt::to_string(shape));
    } else {
      known *= shape[i];
    }
  }
  if (infer >= 0) {
    if (known == 0 || n % known != 0)
      throw std::invalid_argument(std::string(op) + ": cannot reshape " + to_string(n) + " elements into " +
                                  mvgpt::to_string(shape));
    out[infer] = n / known;
  } else if (known != n) {
    throw std::invalid_argument(std::string(op) + ": cannot reshape " + to_string(n) + " elements into " +
                                mvgpt::to_string(shape) + " (" + to_string(known) + " elements)");
  }
  return out;
}

std::optional<Strides> reshape_strides(const Shape& shape, const Strides& strides, const Shape& new_shape) {
  Strides out;
  out.resize(new_shape.size());
  if (numel(shape) == 0 || numel(new_shape) == 0) return contiguous_strides(new_shape);
  // Walk groups of old dimensions that are contiguous among themselves and match a group of new ones.
  int oi = 0, ni = 0;
  const int on = shape.size(), nn = new_shape.size();
  while (oi < on || ni < nn) {
    // Skip size-1 dims on both sides: they take any stride.
    if (ni < nn && new_shape[ni] == 1) {
      out[ni] = (ni + 1 < nn) ? 0 : 1;
      ++ni;
      continue;
    }
    if (oi < on && shape[oi] == 1) {
      ++oi;
      continue;
    }
    if (oi >= on || ni >= nn) return std::nullopt;
    int64_t old_size = shape[oi], new_size = new_shape[ni];
    int og = oi, ng = ni;
    while (old_size != new_size) {
      if (old_size < new_size) {
        ++oi;
        if (oi >= on) return std::nullopt;
        if (shape[oi] == 1) continue;
        old_size *= shape[oi];
      } else {
        ++ni;
        if (ni >= nn) return std::nullopt;
        new_size *= new_shape[ni];
      }
    }
    // Old dims og..oi must be contiguous with respect to each other (ignoring size-1 dims).
    int64_t prev = -1, inner = -1;
    for (int k = oi; k >= og; --k) {
      if (shape[k] == 1) continue;
      if (prev >= 0 && strides[k] != strides[prev] * shape[prev]) return std::nullopt;
      if (inner < 0) inner = k;
      prev = k;
    }
    // The new group's innermost dim steps like the old group's innermost one.
    int64_t stride = strides[inner];
    for (int k = ni; k >= ng; --k) {
      out[k] = stride;
      stride *= new_shape[k];
    }
    ++oi;
    ++ni;
  }
  return out;
}

std::optional<Tensor> try_reshape(const Tensor& t, const Shape& new_shape) {
  Shape s = infer_shape(new_shape, t.numel(), "reshape");
  auto st = reshape_strides(t.shape(), t.strides(), s);
  if (!st) return std::nullopt;
  return t.as_strided(s, *st, t.offset());
}

Tensor permute(const Tensor& t, const std::vector<int>& axes) {
  const int n = t.dim();
  if (int(axes.size()) != n)
    throw std::invalid_argument("permute: " + to_string(axes.size()) + " axes given for a tensor of " + to_string(n) +
                                " dimensions");
  std::vector<bool> seen(size_t(n), false);
  Shape s;
  Strides st;
  for (int a : axes) {
    int ax = normalize_axis(a, n, "permute");
    if (seen[size_t(ax)]) throw std::invalid_argument("permute: axis " + to_string(ax) + " repeated");
    seen[size_t(ax)] = true;
    s.push_back(t.shape()[ax]);
    st.push_back(t.strides()[ax]);
  }
  return t.as_strided(s, st, t.offset());
}

Tensor transpose(const Tensor& t, int axis0, int axis1) {
  std::vector<int> axes(size_t(t.dim()));
  std::iota(axes.begin(), axes.end(), 0);
  std::swap(axes[size_t(normalize_axis(axis0, t.dim(), "transpose"))], axes[size_t(normalize_axis(axis1, t.dim(), "transpose"))]);
  return permute(t, axes);
}

Tensor narrow(const Tensor& t, int axis, int64_t start, int64_t length) {
  int ax = normalize_axis(axis, t.dim(), "narrow");
  int64_t n = t.shape()[ax];
  if (start < 0) start += n;
  if (start < 0 || length < 0 || start + length > n)
    throw std::invalid_argument("narrow: range [" + to_string(start) + ", " + to_string(start + length) +
                                ") is outside axis " + to_string(ax) + " of size " + to_string(n));
  Shape s = t.shape();
  s[ax] = length;
  return t.as_strided(s, t.strides(), t.offset() + start * t.strides()[ax]);
}

Tensor select(const Tensor& t, int axis, int64_t index) {
  int ax = normalize_axis(axis, t.dim(), "select");
  int64_t n = t.shape()[ax];
  if (index < 0) index += n;
  if (index < 0 || index >= n)
    throw std::invalid_argument("select: index " + to_string(index) + " is outside axis " + to_string(ax) +
                                " of size " + to_string(n));
  Shape s = t.shape();
  Strides st = t.strides();
  int64_t off = t.offset() + index * st[ax];
  s.erase(ax);
  st.erase(ax);
  return t.as_strided(s, st, off);
}

Tensor expand(const Tensor& t, const Shape& shape) {
  const int n = shape.size(), k = t.dim();
  if (n < k)
    throw std::invalid_argument("expand: cannot expand " + mvgpt::to_string(t.shape()) + " to fewer dimensions " +
                                mvgpt::to_string(shape));
  Strides st;
  st.resize(n);
  Shape out = shape;
  for (int i = 0; i < n; ++i) {
    int j = i - (n - k);
    if (j < 0) {
      st[i] = 0;
      continue;
    }
    int64_t have = t.shape()[j];
    if (out[i] == -1) out[i] = have;
    if (have == out[i]) st[i] = t.strides()[j];
    else if (have == 1) st[i] = 0;
    else
      throw std::invalid_argument("expand: cannot expand " + mvgpt::to_string(t.shape()) + " to " +
                                  mvgpt::to_string(shape) + " (dimension " + to_string(i) + ")");
  }
  return t.as_strided(out, st, t.offset());
}

Tensor squeeze(const Tensor& t, int axis) {
  int ax = normalize_axis(axis, t.dim(), "squeeze");
  if (t.shape()[ax] != 1)
    throw std::invalid_argument("squeeze: axis " + to_string(ax) + " has size " + to_string(t.shape()[ax]) + ", not 1");
  Shape s = t.shape();
  Strides st = t.strides();
  s.erase(ax);
  st.erase(ax);
  return t.as_strided(s, st, t.offset());
}

Tensor unsqueeze(const Tensor& t, int axis) {
  int ax = normalize_axis(axis, t.dim() + 1, "unsqueeze");
  Shape s = t.shape();
  Strides st = t.strides();
  int64_t stride = ax < t.dim() ? st[ax] * s[ax] : 1;
  s.insert(ax, 1);
  st.insert(ax, stride);
  return t.as_strided(s, st, t.offset());
}

}  // namespace mvgpt::views
