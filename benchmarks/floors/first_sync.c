/* The floor of a checked first sync in C (issue 23): benchmarks/floors/first_sync.py's floor
 * with no interpreter in it -- the mechanism's own cost. Compiled at run time by
 * benchmarks/floors/first_sync_c.py (cc -O2 -pthread); benchmarks/copy_sync.py checks the copy
 * it leaves holds the sync's names, sizes, modes and ns mtimes.
 *
 *     first_sync SRC DST THREADS     (prints the copy's wall time in ns on stdout)
 *
 * Per file, the same system calls as the Python floor and the sync (copy/walk.py,
 * copy/source.py, copy/fileops.py): fstatat without following relative to the held source
 * directory (the judgement), openat O_NOFOLLOW + fstat (the very inode judged), openat
 * O_CREAT|O_EXCL|O_NOFOLLOW of the copy entry, sendfile of the judged size, fchmod, futimens
 * (mtime kept), fstat (the copy's stamp for the record, kept in memory), two close. Per
 * directory: fstatat, openat without following + fstat check, mkdirat 0700, openat, fchmod,
 * the listing, futimens once its entries are written. THREADS > 1 splits the top-level
 * directories round-robin between that many pthreads, as the Python floor does. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define DIR_FLAGS (O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
#define READ_FLAGS (O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)
#define CREATE_FLAGS (O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC)

/* The record's stamps: (source ino, mtime, ctime, copy ino, ctime) per file, as the sync
 * keeps them; only written, so the floor pays for keeping them and nothing else. */
struct stamp {
    ino_t src_ino, dst_ino;
    long long src_mtime, src_ctime, dst_ctime;
    mode_t mode;
};

struct part {
    const char *src, *dst;
    char **names;
    size_t count, first, step;
    struct stamp *stamps;
    size_t used, cap;
    int failed;
};

static void die(const char *what, const char *name) {
    fprintf(stderr, "first_sync: %s %s: %s\n", what, name, strerror(errno));
    exit(1);
}

static long long ns(struct timespec t) { return t.tv_sec * 1000000000LL + t.tv_nsec; }

static void keep(struct part *p, const struct stat *s, const struct stat *d, mode_t mode) {
    if (p->used == p->cap) {
        p->cap = p->cap ? p->cap * 2 : 1024;
        p->stamps = realloc(p->stamps, p->cap * sizeof *p->stamps);
        if (!p->stamps) die("realloc", "stamps");
    }
    struct stamp *k = &p->stamps[p->used++];
    k->src_ino = s->st_ino;
    k->dst_ino = d->st_ino;
    k->src_mtime = ns(s->st_mtim);
    k->src_ctime = ns(s->st_ctim);
    k->dst_ctime = ns(d->st_ctim);
    k->mode = mode;
}

static void copy_file(struct part *p, int sd, int dd, const char *name) {
    struct stat lst, sst, dst;
    if (fstatat(sd, name, &lst, AT_SYMLINK_NOFOLLOW) < 0) die("lstat", name);
    if (!S_ISREG(lst.st_mode)) return; /* links and specials: the benchmark's tree has none */
    int fd = openat(sd, name, READ_FLAGS);
    if (fd < 0) die("open", name);
    if (fstat(fd, &sst) < 0) die("fstat", name);
    if (sst.st_ino != lst.st_ino || sst.st_dev != lst.st_dev) {
        errno = ESTALE;
        die("changed while copied:", name);
    }
    mode_t mode = sst.st_mode & 0777;
    int out = openat(dd, name, CREATE_FLAGS, 0600);
    if (out < 0) die("create", name);
    off_t left = sst.st_size;
    while (left > 0) {
        ssize_t sent = sendfile(out, fd, NULL, (size_t)left);
        if (sent < 0) die("sendfile", name);
        if (sent == 0) break;
        left -= sent;
    }
    if (fchmod(out, mode) < 0) die("fchmod", name);
    struct timespec times[2] = {sst.st_atim, sst.st_mtim};
    if (futimens(out, times) < 0) die("futimens", name);
    if (fstat(out, &dst) < 0) die("fstat", name);
    keep(p, &sst, &dst, mode);
    close(out);
    close(fd);
}

static void copy_entries(struct part *p, int sd, int dd, char **only, size_t first,
                         size_t step, size_t count);

static void copy_dir(struct part *p, int src_parent, int dst_parent, const char *name) {
    struct stat st, now;
    if (fstatat(src_parent, name, &st, AT_SYMLINK_NOFOLLOW) < 0) die("lstat", name);
    int sd = openat(src_parent, name, DIR_FLAGS);
    if (sd < 0) die("open", name);
    if (fstat(sd, &now) < 0) die("fstat", name);
    if (!S_ISDIR(st.st_mode) || now.st_ino != st.st_ino) {
        errno = ESTALE;
        die("changed while copied:", name);
    }
    if (mkdirat(dst_parent, name, 0700) < 0) die("mkdir", name);
    int dd = openat(dst_parent, name, DIR_FLAGS);
    if (dd < 0) die("open copy", name);
    if (fchmod(dd, (st.st_mode & 0777) | 0700) < 0) die("fchmod", name);
    copy_entries(p, sd, dd, NULL, 0, 1, 0);
    struct timespec times[2] = {st.st_atim, st.st_mtim};
    if (futimens(dd, times) < 0) die("futimens", name);
    close(dd);
    close(sd);
}

static int wanted(char **only, size_t first, size_t step, size_t count, const char *name) {
    for (size_t i = first; i < count; i += step)
        if (strcmp(only[i], name) == 0) return 1;
    return 0;
}

/* The listing is read whole before any entry is copied, as os.scandir's list is in the
 * Python floor and source.listing in the sync. */
static void copy_entries(struct part *p, int sd, int dd, char **only, size_t first,
                         size_t step, size_t count) {
    int lfd = dup(sd);
    if (lfd < 0) die("dup", "listing");
    DIR *dir = fdopendir(lfd);
    if (!dir) die("fdopendir", "listing");
    size_t n = 0, cap = 256;
    char **names = malloc(cap * sizeof *names);
    unsigned char *kinds = malloc(cap);
    struct dirent *e;
    while ((e = readdir(dir)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        if (n == cap) {
            cap *= 2;
            names = realloc(names, cap * sizeof *names);
            kinds = realloc(kinds, cap);
        }
        names[n] = strdup(e->d_name);
        kinds[n++] = e->d_type;
    }
    closedir(dir);
    for (size_t i = 0; i < n; i++) {
        if (only && !wanted(only, first, step, count, names[i])) {
            free(names[i]);
            continue;
        }
        if (kinds[i] == DT_DIR)
            copy_dir(p, sd, dd, names[i]);
        else
            copy_file(p, sd, dd, names[i]);
        free(names[i]);
    }
    free(names);
    free(kinds);
}

static void *run_part(void *arg) {
    struct part *p = arg;
    int sd = open(p->src, DIR_FLAGS), dd = open(p->dst, DIR_FLAGS);
    if (sd < 0) die("open", p->src);
    if (dd < 0) die("open", p->dst);
    copy_entries(p, sd, dd, p->names, p->first, p->step, p->count);
    close(sd);
    close(dd);
    return NULL;
}

static int by_name(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: first_sync SRC DST THREADS\n");
        return 2;
    }
    const char *src = argv[1], *dst = argv[2];
    long threads = strtol(argv[3], NULL, 10);
    if (threads < 1 || threads > 64) threads = 1;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    if (mkdir(dst, 0700) < 0) die("mkdir", dst);
    /* The top-level names, sorted, split round-robin (the Python floor's parts). */
    DIR *top = opendir(src);
    if (!top) die("opendir", src);
    size_t n = 0, cap = 256;
    char **names = malloc(cap * sizeof *names);
    struct dirent *e;
    while ((e = readdir(top)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        if (n == cap) names = realloc(names, (cap *= 2) * sizeof *names);
        names[n++] = strdup(e->d_name);
    }
    closedir(top);
    qsort(names, n, sizeof *names, by_name);
    struct part parts[64];
    pthread_t ids[64];
    memset(parts, 0, sizeof parts);
    for (long i = 0; i < threads; i++) {
        parts[i] = (struct part){src, dst, names, n, (size_t)i, (size_t)threads, NULL, 0, 0, 0};
    }
    if (threads == 1) {
        run_part(&parts[0]);
    } else {
        for (long i = 0; i < threads; i++)
            if (pthread_create(&ids[i], NULL, run_part, &parts[i]) != 0) die("pthread", "create");
        for (long i = 0; i < threads; i++) pthread_join(ids[i], NULL);
    }
    struct stat st;
    if (stat(src, &st) < 0) die("stat", src);
    struct timespec times[2] = {st.st_atim, st.st_mtim};
    if (utimensat(AT_FDCWD, dst, times, 0) < 0) die("utime", dst);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    size_t files = 0;
    for (long i = 0; i < threads; i++) files += parts[i].used;
    printf("%lld %zu\n", ns(t1) - ns(t0), files);
    return 0;
}
