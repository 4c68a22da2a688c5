#include "train/distributed/communicator.h"

namespace hyb {

std::vector<double> Communicator::all_reduce_host(const std::vector<double>& values, ReduceOp op, Device device) {
  Tensor t = Tensor::from_vector(values, {int64_t(values.size())}).to(device);
  after_compute();
  all_reduce(t, op);
  before_compute();
  return t.to_double_vector();
}

}  // namespace hyb
