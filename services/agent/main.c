/* main.c -- gridpool-agent: one node's agent as gp_app_main runs it.  The
 * agent itself is agent.c (a library the simulator runs too); the
 * process' options are config.c, its hooks start.c (service.h). */
#include "gp/app.h"
#include "service.h"

#define AGENT_VERSION "0.1.0"

static const gp_service agent_service = {
    .name = "agent",
    .version = AGENT_VERSION,
    GP_SVC_CFG(agent_cfg, common, agent_cfg_opts),
    .state_size = sizeof(agent_proc),
    .needs = 0,                          /* no Redis, no PostgreSQL */
    .prepare = agent_prepare,
    .init = agent_init,
    .stop = agent_stop,
    .free = agent_proc_free,
};

int
main(int argc, char **argv)
{
    return gp_app_main(&agent_service, argc, argv);
}
