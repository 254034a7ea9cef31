/*
 * baseline_client.c: the minimal echo load generator knee-node is compared against.
 *
 * One TCP connection (TCP_NODELAY), a plain blocking request/response loop.
 * Usage: baseline_client HOST PORT REQUESTS RATE_PER_S REPLY_BYTES
 *   RATE_PER_S = 0 sends back to back; otherwise each request is sent at its slot
 *   start + i / rate (clock_nanosleep TIMER_ABSTIME, CLOCK_MONOTONIC), and the round
 *   trip is measured from the actual send.
 * Prints one JSON line: requests, p50_ns, p99_ns, elapsed_s, cpu_ns (user + sys of the
 * whole process), cpu_ns_per_request.
 * Exits non-zero on any I/O error or on a reply whose request id does not match.
 *
 * Wire format: frame = u32 LE length + payload.
 *   request payload = request_id u64, op u16 (1 = echo), flags u16, then the echo body:
 *                     reply_bytes u32, zero padding up to REQUEST_BODY bytes.
 *   reply payload   = 44-byte header (request_id u64, status u16, flags u16, 4 x u64)
 *                     + reply_bytes bytes.
 */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#define REQUEST_HEADER 12
#define REQUEST_BODY 16
#define REPLY_HEADER 44
#define OP_ECHO 1
#define STATUS_OK 0

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void put_u16(unsigned char *p, uint16_t v) {
    p[0] = (unsigned char)v;
    p[1] = (unsigned char)(v >> 8);
}

static void put_u32(unsigned char *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}

static void put_u64(unsigned char *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}

static uint64_t get_le(const unsigned char *p, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

/* All of buf written (sending) or read, retrying on EINTR and short counts; -1 on an
   error or a closed connection. */
static int transfer_all(int fd, unsigned char *buf, size_t len, int sending) {
    while (len > 0) {
        ssize_t n = sending ? write(fd, buf, len) : read(fd, buf, len);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return -1;
        buf += n;
        len -= (size_t)n;
    }
    return 0;
}

static int connect_to(const char *host, const char *port) {
    struct addrinfo hints, *res, *ai;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    if (getaddrinfo(host, port, &hints, &res) != 0) return -1;
    int fd = -1;
    for (ai = res; ai != NULL; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol);
        if (fd < 0) continue;
        if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) break;
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (fd >= 0) {
        int one = 1;
        if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) != 0) {
            close(fd);
            return -1;
        }
    }
    return fd;
}

static void sleep_until(uint64_t t_ns) {
    struct timespec ts;
    ts.tv_sec = (time_t)(t_ns / 1000000000ull);
    ts.tv_nsec = (long)(t_ns % 1000000000ull);
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR) {
    }
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

static uint64_t cpu_ns(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    uint64_t us = (uint64_t)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000ull +
                  (uint64_t)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
    return us * 1000ull;
}

/* Nearest-rank quantile of a sorted array. */
static uint64_t quantile(const uint64_t *sorted, long n, double q) {
    long rank = (long)(q * (double)n + 0.999999);
    if (rank < 1) rank = 1;
    if (rank > n) rank = n;
    return sorted[rank - 1];
}

int main(int argc, char **argv) {
    if (argc != 6) {
        fprintf(stderr, "usage: %s HOST PORT REQUESTS RATE_PER_S REPLY_BYTES\n", argv[0]);
        return 2;
    }
    long requests = atol(argv[3]);
    double rate = atof(argv[4]);
    long reply_bytes = atol(argv[5]);
    if (requests <= 0 || rate < 0 || reply_bytes < 0 || reply_bytes > (1 << 24)) {
        fprintf(stderr, "bad arguments\n");
        return 2;
    }
    int fd = connect_to(argv[1], argv[2]);
    if (fd < 0) {
        perror("connect");
        return 1;
    }
    const size_t req_payload = REQUEST_HEADER + REQUEST_BODY;
    const size_t rep_payload = REPLY_HEADER + (size_t)reply_bytes;
    unsigned char req[4 + REQUEST_HEADER + REQUEST_BODY];
    unsigned char *rep = malloc(4 + rep_payload);
    uint64_t *rtt = malloc(sizeof(uint64_t) * (size_t)requests);
    if (rep == NULL || rtt == NULL) {
        fprintf(stderr, "out of memory\n");
        return 1;
    }
    memset(req, 0, sizeof req);
    put_u32(req, (uint32_t)req_payload);
    put_u16(req + 12, OP_ECHO);
    put_u32(req + 4 + REQUEST_HEADER, (uint32_t)reply_bytes);

    const uint64_t interval_ns = rate > 0 ? (uint64_t)(1e9 / rate) : 0;
    const uint64_t start = now_ns();
    for (long i = 0; i < requests; i++) {
        if (interval_ns > 0) sleep_until(start + (uint64_t)i * interval_ns);
        uint64_t id = (uint64_t)i + 1;
        put_u64(req + 4, id);
        uint64_t t0 = now_ns();
        if (transfer_all(fd, req, sizeof req, 1) != 0 || transfer_all(fd, rep, 4 + rep_payload, 0) != 0) {
            fprintf(stderr, "request %llu: I/O error or connection closed\n",
                    (unsigned long long)id);
            return 1;
        }
        rtt[i] = now_ns() - t0;
        uint64_t len = get_le(rep, 4), got = get_le(rep + 4, 8), status = get_le(rep + 12, 2);
        if (len != rep_payload || got != id || status != STATUS_OK) {
            fprintf(stderr, "request %llu: bad reply (len %llu, id %llu, status %llu)\n",
                    (unsigned long long)id, (unsigned long long)len,
                    (unsigned long long)got, (unsigned long long)status);
            return 1;
        }
    }
    const double elapsed_s = (double)(now_ns() - start) / 1e9;
    const uint64_t cpu = cpu_ns(); /* the whole process, as a parent's rusage would see it */
    close(fd);
    qsort(rtt, (size_t)requests, sizeof(uint64_t), cmp_u64);
    printf("{\"requests\":%ld,\"p50_ns\":%llu,\"p99_ns\":%llu,\"elapsed_s\":%.6f,"
           "\"cpu_ns\":%llu,\"cpu_ns_per_request\":%.1f}\n",
           requests, (unsigned long long)quantile(rtt, requests, 0.50),
           (unsigned long long)quantile(rtt, requests, 0.99), elapsed_s,
           (unsigned long long)cpu, (double)cpu / (double)requests);
    free(rtt);
    free(rep);
    return 0;
}
