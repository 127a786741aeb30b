/*
 * trace_merge.h - ringcc-run --trace: the ranks' trace files in one
 * timeline (for ringcc-run.c; header-only, as the launcher links nothing).
 *
 * Each rank of each communicator writes DIR/ringcc-trace-ID-rRANK.json
 * (lib/observe/trace.c): the Chrome trace-event format, one event per line
 * between a first line '{"traceEvents":[' and a line '],', its times
 * already on rank 0's clock (the offsets were measured at init), then an
 * "otherData" line naming its communicator, rank and size. Merging is
 * therefore a matter of lines: every file's event lines, in one array.
 *
 * Where several communicators wrote files (ringcc_comm_split), each keeps
 * its own process rows: the largest communicator's rank r stays pid r, the
 * next one's ranks follow it, and their rows are named "comm ID rank r".
 * Within a communicator, pid r is rank r and the files' times share rank
 * 0's clock; communicators on one host share the host's clock too.
 */
#ifndef RCC_TRACE_MERGE_H
#define RCC_TRACE_MERGE_H

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TRACE_PREFIX "ringcc-trace-"
#define TRACE_SUFFIX ".json"

struct trace_file {
  char *text;   /* the whole file */
  char *events; /* its event lines, in text (NUL-terminated) */
  char comm[32];
  int rank, nranks;
  int group;    /* index of its communicator after sorting */
};

/* Whether name is a rank's file: ringcc-trace-ID-rRANK.json. */
static int trace_is_rank_file(const char *name) {
  size_t n = strlen(name), ls = strlen(TRACE_SUFFIX);
  return strncmp(name, TRACE_PREFIX, strlen(TRACE_PREFIX)) == 0 && n > ls &&
         strcmp(name + n - ls, TRACE_SUFFIX) == 0 && strstr(name, "-r") != NULL;
}

static char *trace_read_all(const char *path) {
  FILE *f = fopen(path, "r");
  if (f == NULL)
    return NULL;
  size_t cap = 1 << 16, len = 0;
  char *buf = malloc(cap);
  while (buf != NULL) {
    size_t got = fread(buf + len, 1, cap - len - 1, f);
    len += got;
    if (got == 0)
      break;
    if (cap - len < 2) {
      char *bigger = realloc(buf, cap * 2);
      if (bigger == NULL) {
        free(buf);
        buf = NULL;
        break;
      }
      buf = bigger, cap *= 2;
    }
  }
  if (buf != NULL)
    buf[len] = '\0';
  fclose(f);
  return buf;
}

/* Splits a rank's file into its event lines and its identity; 0, or -1 if
 * the file is not one libringcc wrote (or was cut short). */
static int trace_parse(struct trace_file *t) {
  const char *head = "{\"traceEvents\":[\n";
  if (strncmp(t->text, head, strlen(head)) != 0)
    return -1;
  char *end = strstr(t->text, "\n],\n");
  const char *other = end ? strstr(end, "\"otherData\":{") : NULL;
  if (end == NULL || other == NULL)
    return -1;
  *end = '\0';
  t->events = t->text + strlen(head);
  const char *c = strstr(other, "\"comm\":\""), *r = strstr(other, "\"rank\":"),
             *n = strstr(other, "\"nranks\":");
  if (c == NULL || r == NULL || n == NULL ||
      sscanf(c, "\"comm\":\"%31[0-9a-f]\"", t->comm) != 1 ||
      sscanf(r, "\"rank\":%d", &t->rank) != 1 ||
      sscanf(n, "\"nranks\":%d", &t->nranks) != 1)
    return -1;
  return 0;
}

/* Largest communicator first, then by id; within one, by rank. */
static int trace_order(const void *a, const void *b) {
  const struct trace_file *x = a, *y = b;
  if (x->nranks != y->nranks)
    return y->nranks - x->nranks;
  int c = strcmp(x->comm, y->comm);
  return c ? c : x->rank - y->rank;
}

/* Writes one event line, renumbered when base != 0. */
static void trace_put_line(FILE *out, const char *line, size_t len, int base,
                           const struct trace_file *t) {
  int pid;
  int skip = 0;
  if (base == 0 || sscanf(line, "{\"pid\":%d,%n", &pid, &skip) != 1 ||
      skip == 0) {
    fwrite(line, 1, len, out);
    return;
  }
  const char *name = "\"name\":\"process_name\",\"args\":{\"name\":\"rank ";
  const char *at = strstr(line, name);
  fprintf(out, "{\"pid\":%d,", base + pid);
  if (at != NULL && at < line + len) {
    fwrite(line + skip, 1, (size_t)(at - line) - (size_t)skip, out);
    fprintf(out, "\"name\":\"process_name\",\"args\":{\"name\":\"comm %s rank ",
            t->comm);
    const char *rest = at + strlen(name);
    fwrite(rest, 1, len - (size_t)(rest - line), out);
  } else {
    fwrite(line + skip, 1, len - (size_t)skip, out);
  }
}

/* Merges DIR's rank files into out_path. Returns the number of files
 * merged (0: none found), or -1 with msg saying why. *comms: how many
 * communicators they came from. */
static int trace_merge(const char *dir, const char *out_path, int *comms,
                       char *msg, size_t msglen) {
  DIR *d = opendir(dir);
  struct trace_file *files = NULL;
  int nfiles = 0, cap = 0, bad = 0;
  struct dirent *de;
  *comms = 0;
  if (d == NULL) {
    snprintf(msg, msglen, "cannot open %s: %s", dir, strerror(errno));
    return -1;
  }
  while ((de = readdir(d)) != NULL) {
    if (!trace_is_rank_file(de->d_name))
      continue;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
    if (nfiles == cap) {
      cap = cap ? 2 * cap : 16;
      struct trace_file *more = realloc(files, sizeof(*files) * (size_t)cap);
      if (more == NULL)
        break;
      files = more;
    }
    struct trace_file *t = &files[nfiles];
    memset(t, 0, sizeof(*t));
    t->text = trace_read_all(path);
    if (t->text == NULL || trace_parse(t) != 0) {
      free(t->text);
      bad++;
      continue;
    }
    nfiles++;
  }
  closedir(d);
  if (nfiles == 0) {
    free(files);
    if (bad == 0) {
      msg[0] = '\0';
      return 0;
    }
    snprintf(msg, msglen, "none of the %d trace files in %s could be read "
             "(cut short?)", bad, dir);
    return -1;
  }
  qsort(files, (size_t)nfiles, sizeof(*files), trace_order);
  int ret = nfiles;
  FILE *out = fopen(out_path, "w");
  if (out == NULL) {
    snprintf(msg, msglen, "cannot write %s: %s", out_path, strerror(errno));
    ret = -1;
  } else {
    fputs("{\"traceEvents\":[\n", out);
    int base = 0, first = 1;
    for (int i = 0; i < nfiles; i++) {
      if (i > 0 && strcmp(files[i].comm, files[i - 1].comm) != 0)
        base += files[i - 1].nranks;
      if (i == 0 || strcmp(files[i].comm, files[i - 1].comm) != 0)
        (*comms)++;
      for (const char *line = files[i].events; *line;) {
        const char *nl = strchr(line, '\n');
        size_t len = nl ? (size_t)(nl - line) : strlen(line);
        size_t keep = len > 0 && line[len - 1] == ',' ? len - 1 : len;
        if (keep > 0) { /* the separators are written here */
          if (!first)
            fputs(",\n", out);
          trace_put_line(out, line, keep, base, &files[i]);
          first = 0;
        }
        line = nl ? nl + 1 : line + len;
      }
    }
    fprintf(out, "\n],\n\"displayTimeUnit\":\"ns\",\n\"otherData\":{"
            "\"ringcc_trace_merged\":1,\"files\":%d,\"communicators\":%d,"
            "\"unreadable\":%d}}\n", nfiles, *comms, bad);
    int failed = ferror(out);
    if (fclose(out) != 0 || failed) {
      snprintf(msg, msglen, "writing %s failed", out_path);
      ret = -1;
    } else if (bad) {
      snprintf(msg, msglen, "%d more file(s) could not be read (cut short?)",
               bad);
    } else {
      msg[0] = '\0';
    }
  }
  for (int i = 0; i < nfiles; i++)
    free(files[i].text);
  free(files);
  return ret;
}

/* Removes the rank files a former run left in dir (not other files). */
static void trace_clean(const char *dir) {
  DIR *d = opendir(dir);
  struct dirent *de;
  if (d == NULL)
    return;
  while ((de = readdir(d)) != NULL)
    if (trace_is_rank_file(de->d_name) ||
        (strncmp(de->d_name, TRACE_PREFIX, strlen(TRACE_PREFIX)) == 0 &&
         strstr(de->d_name, ".json.tmp") != NULL)) {
      char path[4096];
      snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
      unlink(path);
    }
  closedir(d);
}

#endif /* RCC_TRACE_MERGE_H */
