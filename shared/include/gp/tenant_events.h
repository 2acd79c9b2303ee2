/* gp/tenant_events.h -- each tenant's durable consumer on the stream JOBS,
 * the one way a tenant replays its own job events after a disconnection
 * (schemas/asyncapi.json: x-gp-streams.JOBS.consumers "tenant-{tenant}").
 * The scheduler makes it, filtered to gp.events.<tenant>.job.>
 * (gp_op_stream_filter of the jobEvent operation from "job"); the tenant's
 * identity may only fetch and ack it (deploy/nats-auth), so it cannot
 * choose a filter that reads another tenant's events; gpctl watch jobs
 * --durable binds to it. */
#ifndef GP_TENANT_EVENTS_H
#define GP_TENANT_EVENTS_H

#define GP_JOBS_STREAM         "JOBS"
/* the durable's name: "tenant-" + the tenant id (no dot, so a token) */
#define GP_TENANT_CONSUMER_FMT "tenant-%s"

#endif
