// Per-step values of a pipelined kernel that copies the steps ahead into shared memory while it
// computes the current one (the rmsnorm backwards): the values each step in flight needs later (its
// rows' rstd) wait in registers, oldest first. After unrolling every index is a constant, so the
// queue stays in registers.
//   float rs_ahead[kStages - 1][kRows];
//   rs = rs_ahead[0]; shift_steps(rs_ahead); rs_ahead[kStages - 2][r] = rstd[next row r];
#pragma once

namespace hyb {

// Drops the oldest step (row 0) and moves the others down one, freeing the last row for the newest.
template <int kSteps, int kRows>
__device__ __forceinline__ void shift_steps(float (&ahead)[kSteps][kRows]) {
#pragma unroll
  for (int a = 0; a + 1 < kSteps; ++a)
#pragma unroll
    for (int r = 0; r < kRows; ++r) ahead[a][r] = ahead[a + 1][r];
}

}  // namespace hyb
