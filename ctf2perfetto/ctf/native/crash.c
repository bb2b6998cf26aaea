/*
 * The last line of a decode that libbabeltrace2 brings down.
 *
 * Some corrupt event data reaches code in the library that memq cannot check
 * beforehand (ctf2perfetto/ctfcheck.py checks packets, not events): a sequence
 * length of 2^32 makes it allocate without bound and crash, an unforeseen
 * assert aborts. While memq_crash_guard() is on, such a fatal signal writes the
 * one error line the caller prepared (which file, what to do) and ends the
 * process with exit status 1 instead of dying silently. Async-signal-safe: the
 * handler only write()s a buffer filled beforehand and _exit()s.
 */
#define _GNU_SOURCE
#include <signal.h>
#include <string.h>
#include <unistd.h>

static char crash_line[4096];
static volatile size_t crash_len;
static const int fatal[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};
static struct sigaction previous[sizeof(fatal) / sizeof(fatal[0])];
static int installed;

static void on_fatal(int sig)
{
	(void)sig;
	size_t done = 0;
	while (done < crash_len) {
		ssize_t n = write(2, crash_line + done, crash_len - done);
		if (n <= 0)
			break;
		done += (size_t)n;
	}
	_exit(1);
}

/* line != NULL: install the handlers with this line (ending in '\n'); NULL: restore the previous ones. */
void memq_crash_guard(const char *line)
{
	size_t n = sizeof(fatal) / sizeof(fatal[0]);
	if (line) {
		size_t len = strlen(line);
		if (len >= sizeof(crash_line))
			len = sizeof(crash_line) - 1;
		crash_len = 0;
		memcpy(crash_line, line, len);
		crash_len = len;
		if (installed)
			return;
		struct sigaction sa;
		memset(&sa, 0, sizeof(sa));
		sa.sa_handler = on_fatal;
		sigemptyset(&sa.sa_mask);
		for (size_t i = 0; i < n; i++)
			sigaction(fatal[i], &sa, &previous[i]);
		installed = 1;
	} else if (installed) {
		for (size_t i = 0; i < n; i++)
			sigaction(fatal[i], &previous[i], NULL);
		installed = 0;
	}
}
