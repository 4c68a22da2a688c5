#include "core/parallel.h"

namespace hyb {

int num_threads() {
  static const int n = omp_get_max_threads();
  return n;
}

}  // namespace hyb
