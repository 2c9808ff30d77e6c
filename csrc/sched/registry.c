/* Registry of tiletrain's own scheduling policies (filled at load time by TT_SCHED_REGISTER). */
#include <string.h>

#include "tt_internal.h"
#include "tt_trace.h"
#include "tt_sched.h"

static struct starpu_sched_policy *policies[TT_SCHED_MAX_POLICIES];
static int npolicies = 0;

void tt_sched_register(struct starpu_sched_policy *policy)
{
    if (npolicies < TT_SCHED_MAX_POLICIES && policy && policy->policy_name)
        policies[npolicies++] = policy;
}

struct starpu_sched_policy *tt_sched_find(const char *name)
{
    if (!name)
        return NULL;
    for (int i = 0; i < npolicies; i++)
        if (strcmp(policies[i]->policy_name, name) == 0)
            return policies[i];
    return NULL;
}

int tt_sched_policy_count(void) { return npolicies; }

const char *tt_sched_policy_name(int i) { return (i >= 0 && i < npolicies) ? policies[i]->policy_name : NULL; }

const char *tt_sched_policy_description(int i)
{
    return (i >= 0 && i < npolicies) ? policies[i]->policy_description : NULL;
}
