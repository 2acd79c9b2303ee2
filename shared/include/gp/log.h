/* gp/log.h -- structured logs: one line per event, key=value fields.
 *
 *   ts=2026-12-02T08:51:02.123Z level=warn svc=registry event=redis_down err=UNAVAIL detail="..."
 *
 * The process-wide settings (service name, level, output) are written once
 * by gp_log_setup() at start-up before any thread exists, and only read
 * afterwards; that is the one piece of process state shared/ keeps.  Any
 * thread may log: each line is written with one write(2). */
#ifndef GP_LOG_H
#define GP_LOG_H

typedef enum gp_log_level {
    GP_LOG_DEBUG,
    GP_LOG_INFO,
    GP_LOG_WARN,
    GP_LOG_ERROR
} gp_log_level;

/* level: "debug", "info", "warn", "error"; unknown means info.  fd: where
 * lines go (2 by default). */
void gp_log_setup(const char *service, const char *level, int fd);
int  gp_log_enabled(gp_log_level lvl);
int  gp_log_parse_level(const char *s, gp_log_level *out);

/* fmt holds the fields after "event=<event>", e.g. "site=%s nodes=%d".
 * Values that may hold spaces go in quotes: detail=\"%s\". */
void gp_log(gp_log_level lvl, const char *event, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#define GP_DEBUG(ev, ...) do { if (gp_log_enabled(GP_LOG_DEBUG)) gp_log(GP_LOG_DEBUG, ev, __VA_ARGS__); } while (0)
#define GP_INFO(ev, ...)  gp_log(GP_LOG_INFO, ev, __VA_ARGS__)
#define GP_WARN(ev, ...)  gp_log(GP_LOG_WARN, ev, __VA_ARGS__)
#define GP_ERROR(ev, ...) gp_log(GP_LOG_ERROR, ev, __VA_ARGS__)

#endif
