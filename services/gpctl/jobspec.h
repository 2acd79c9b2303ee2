/* jobspec.h -- a JobSpec from gpctl submit's flags and from a job file
 * (JSON or YAML: a plain mapping of JobSpec field names to scalars and
 * lists).  Pure: no bus, no printing; every error is a sentence in err.
 *
 * Values go through gp_msg_set_text, so a flag or a file value gets the
 * same type, bound and length checks as a decoded message; list items are
 * checked against the generated MSG_JOB_SPEC_* limits. */
#ifndef GPCTL_JOBSPEC_H
#define GPCTL_JOBSPEC_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "msg_gen.h"

/* What has been set by flags so far: a list flag given for the first time
 * replaces the file's list, repeats append. */
typedef struct spec_flags {
    uint64_t set;               /* bit per MSG_JOB_SPEC__* field */
} spec_flags;

/* Sets one field by wire name from text; a list field gets one more item.
 * 0 ok, -1 with err. */
int jobspec_set(msg_job_spec *s, const char *field, const char *text, char *err, size_t n);

/* One submit flag ("--gpus") with its value (NULL for a bare
 * --interruptible).  1 applied, 0 not a spec flag, -1 bad value (err). */
int jobspec_flag(msg_job_spec *s, spec_flags *sf, const char *flag, const char *value,
                 char *err, size_t n);

/* True when the flag takes no value (--interruptible). */
bool jobspec_flag_bare(const char *flag);

/* Reads a job file (JSON or YAML; JSON is YAML's flow syntax, so one
 * parser reads both) into s.  name is for messages.  0 ok, -1 with err. */
int jobspec_load(msg_job_spec *s, FILE *f, const char *name, char *err, size_t n);

/* gpctl submit's arguments: --tenant T, -f FILE (or --file; "-" is
 * stdin) read first, then every spec flag over it ("--flag value" or
 * "--flag=value").  *tenant points into argv (NULL when absent).  The
 * result is checked with jobspec_check.  0 ok, -1 with err. */
int jobspec_args(int argc, char **argv, msg_job_spec *s, const char **tenant, char *err,
                 size_t n);

/* Checks what the scheduler needs before sending: required fields, and
 * pairs that go together.  0 ok, -1 with err. */
int jobspec_check(const msg_job_spec *s, char *err, size_t n);

/* The flags, one line each, for help. */
void jobspec_print_flags(FILE *out);

#endif
