// Crash points for the tests that prove nothing is lost on a crash. HYBRID_FAULT="NAME:N" makes the
// N-th passage through fault_point("NAME") kill the process with SIGKILL, as an OOM killer or a
// preempted node would: no destructors, no flush. Unset (always, outside those tests) it costs one
// getenv at the first call.
//   fault_point("checkpoint.partial");   // weights written, directory not yet renamed
#pragma once

namespace hyb {

void fault_point(const char* name);

}  // namespace hyb
