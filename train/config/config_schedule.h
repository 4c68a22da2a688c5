// train.schedule (config.md 6.4): the keys of each schedule type, and the warm-up and decay lengths
// derived from whichever unit was given (steps, tokens or a fraction of the run). The resolved
// schedule holds exactly the keys of its type, with warmup_steps (and decay_steps) written out.
//   derive_schedule(schedule, steps, batch_size * seq_len, mqar);
#pragma once
#include "core/config_table.h"
#include "optim/schedule.h"

namespace hyb {

extern const KeyTable kScheduleKeys;

// `schedule` has passed kScheduleKeys. Errors are ConfigKeyError under train.schedule.
void derive_schedule(Json& schedule, int64_t steps, int64_t tokens_per_step, bool mqar);

// The optimizer's view of a resolved schedule.
ScheduleConfig schedule_config_from_json(const Json& schedule, int64_t steps);

}  // namespace hyb
