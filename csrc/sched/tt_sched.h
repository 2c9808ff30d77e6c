/* tiletrain's own StarPU scheduling policies: each file in csrc/sched/ defines one
 * `struct starpu_sched_policy` and registers it with TT_SCHED_REGISTER; CMake builds every .c file
 * there, and `tiletrain.init(sched="<policy_name>")` selects it by its name.
 * See tt_cp.c, the template for a new policy. */
#ifndef TT_SCHED_H
#define TT_SCHED_H

#include <starpu.h>
#include <starpu_scheduler.h>

#include "tiletrain.h"

/* The configuration of the session that starts the policy (csrc/session.c): a policy's settings
 * come from tt_config (tiletrain/config.py reads the environment, the library does not). */
const tt_config *tt_config_current(void);

#define TT_SCHED_MAX_POLICIES 32

/* Called at library load (constructor) by TT_SCHED_REGISTER. */
void tt_sched_register(struct starpu_sched_policy *policy);

/* Register `policy` (a static struct starpu_sched_policy) when libtiletrain is loaded. */
#define TT_SCHED_REGISTER(policy)                                                   \
    __attribute__((constructor)) static void tt_sched_register_##policy(void)      \
    {                                                                               \
        tt_sched_register(&(policy));                                               \
    }

#endif
