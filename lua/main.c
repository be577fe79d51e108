/*
 * main.c: the `normlab` executable, a Lua 5.4 interpreter with normlab built in.
 *
 * Modelled on Lua's own lua.c: everything runs inside a protected main (pmain), so a Lua error
 * never escapes as a crash; every chunk runs through docall (traceback message handler and a
 * SIGINT hook); and lua_close runs before main returns, so buffers owned by Lua objects are
 * freed while the CUDA runtime is still alive (its own teardown runs from atexit, after main).
 *
 * On top of lua.c: the package paths of the build and source trees (compiled in and relative
 * to the executable), normlab.binding_c preloaded, --device, --list, --version, and a REPL with
 * readline, continuation lines, value printing, and Ctrl-C that clears the prompt line or
 * stops the running command, long C calls included (through nl_ctx_interrupt).
 */
/* POSIX 2008 + XSI (getline, sigaction, pselect, realpath); the build passes _GNU_SOURCE. */
#if !defined(_GNU_SOURCE) && !defined(_XOPEN_SOURCE)
#define _XOPEN_SOURCE 700
#endif

#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/select.h>
#include <unistd.h>

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

#include "normlab.h"

#ifdef NL_HAVE_READLINE
#include <readline/history.h>
#include <readline/readline.h>
#endif

/* The build defines these; the fallbacks let the file compile on its own (then only the
 * paths relative to the executable are used). */
#ifndef NL_VERSION
#define NL_VERSION "unknown"
#endif
#ifndef NL_LUA_SRC_DIR
#define NL_LUA_SRC_DIR ""
#endif
#ifndef NL_LUA_BUILD_DIR
#define NL_LUA_BUILD_DIR ""
#endif

#define PROMPT1 "nl> "
#define PROMPT2 "nl>> "
#define HISTORY_FILE ".normlab_history"
#define HISTORY_MAX 1000

/* The Lua 5.4 binding, lua/binding_c.c, compiled into this executable. */
int luaopen_normlab_binding_c(lua_State *L);

static const char *progname = "normlab";

/*
 * Signal state. Handlers only touch these. The Lua state and the library context are
 * published before a command runs; reading an aligned pointer is atomic on every platform
 * normlab targets, and volatile keeps the compiler from caching it across the handler.
 */
static lua_State *volatile signal_L;
static nl_ctx *volatile interrupt_ctx;
static volatile sig_atomic_t prompt_sigint;

/* 1 when stdin is a terminal: prompts, banner, readline and history are for people only;
 * piped input gets plain lines and no prompts, so its output is just the values. */
static int interactive;

/* flags == 0 (no SA_RESTART) makes a SIGINT interrupt a blocking read at the prompt. */
static void setsignal(int sig, void (*handler)(int), int flags)
{
  struct sigaction sa;
  sa.sa_handler = handler;
  sa.sa_flags = flags;
  sigemptyset(&sa.sa_mask);
  sigaction(sig, &sa, NULL);
}

/* The hook the SIGINT handler arms: it runs at the next Lua instruction, where raising an
 * error is safe. */
static void lstop(lua_State *L, lua_Debug *ar)
{
  (void)ar;
  lua_sethook(L, NULL, 0, 0);
  luaL_error(L, "interrupted!");
}

/*
 * SIGINT while a command runs. A signal handler must not touch the Lua state beyond
 * lua_sethook (which Lua allows from signals); a long C call (a benchmark, a roofline
 * measurement) would only see the hook after it returns, so the library context is told too
 * (nl_ctx_interrupt is async-signal-safe) and the call returns early with NL_EINTERRUPTED.
 * Like lua.c, a second Ctrl-C gets the default action: the way out of a call that hangs.
 */
static void on_sigint_running(int sig)
{
  nl_ctx *ctx = interrupt_ctx;
  setsignal(sig, SIG_DFL, 0);
  lua_sethook(signal_L, lstop, LUA_MASKCALL | LUA_MASKRET | LUA_MASKLINE | LUA_MASKCOUNT, 1);
  if (ctx != NULL) nl_ctx_interrupt(ctx);
}

/* SIGINT at the prompt: the line reader sees EINTR and this flag, and drops the line. */
static void on_sigint_prompt(int sig)
{
  (void)sig;
  prompt_sigint = 1;
}

static void l_message(const char *pname, const char *msg)
{
  fflush(stdout); /* keep the order of what was printed before the error */
  if (pname != NULL) fprintf(stderr, "%s: ", pname);
  fprintf(stderr, "%s\n", msg);
  fflush(stderr);
}

/* Prints the error message on top of the stack when status is not LUA_OK. */
static int report(lua_State *L, int status)
{
  if (status != LUA_OK) {
    const char *msg = lua_tostring(L, -1);
    l_message(progname, msg != NULL ? msg : "(error object is not a string)");
    lua_pop(L, 1);
  }
  return status;
}

/* Message handler for every chunk: appends a traceback. An error object with __tostring
 * (a usage error from normlab.cli, say) is the whole message: no traceback. */
static int msghandler(lua_State *L)
{
  const char *msg = lua_tostring(L, 1);
  if (msg == NULL) {
    if (luaL_callmeta(L, 1, "__tostring") && lua_type(L, -1) == LUA_TSTRING) return 1;
    msg = lua_pushfstring(L, "(error object is a %s value)", luaL_typename(L, 1));
  }
  luaL_traceback(L, L, msg, 1);
  return 1;
}

/* The binding keeps its nl_ctx* in the registry from the moment it loads until lua_close. */
static void fetch_ctx(lua_State *L)
{
  lua_getfield(L, LUA_REGISTRYINDEX, "normlab.ctx");
  interrupt_ctx = lua_islightuserdata(L, -1) ? (nl_ctx *)lua_touserdata(L, -1) : NULL;
  lua_pop(L, 1);
}

/* package.preload["normlab.binding_c"]. The binding creates the context as it loads, so the
 * command that first requires normlab can already be interrupted inside C. */
static int open_binding(lua_State *L)
{
  int n = luaopen_normlab_binding_c(L);
  fetch_ctx(L);
  return n;
}

/* Calls the function below narg arguments with the traceback handler and Ctrl-C armed. */
static int docall(lua_State *L, int narg, int nres)
{
  int status;
  int base = lua_gettop(L) - narg;
  lua_pushcfunction(L, msghandler);
  lua_insert(L, base);
  fetch_ctx(L);
  signal_L = L;
  setsignal(SIGINT, on_sigint_running, 0);
  status = lua_pcall(L, narg, nres, base);
  setsignal(SIGINT, SIG_DFL, 0);
  interrupt_ctx = NULL;
  /* A Ctrl-C that came as the command ended leaves its hook armed: disarm it, or the next
   * command would stop at once. A hook the user set with debug.sethook stays. */
  if (lua_gethook(L) == lstop) lua_sethook(L, NULL, 0, 0);
  lua_remove(L, base);
  return status;
}

/* Like lua.c: arg[0] is the script, its arguments follow, the interpreter and its options
 * sit at negative indices. Without a script, arg[0] is the interpreter. */
static void createargtable(lua_State *L, char **argv, int argc, int script)
{
  int i;
  int narg = argc - (script + 1);
  lua_createtable(L, narg > 0 ? narg : 0, script + 1);
  for (i = 0; i < argc; i++) {
    lua_pushstring(L, argv[i]);
    lua_rawseti(L, -2, i - script);
  }
  lua_setglobal(L, "arg");
}

static int dochunk(lua_State *L, int status)
{
  if (status == LUA_OK) status = docall(L, 0, 0);
  return report(L, status);
}

static int dostring(lua_State *L, const char *s, const char *name)
{
  return dochunk(L, luaL_loadbuffer(L, s, strlen(s), name));
}

/* -l mod sets global mod = require("mod"); -l g=mod sets g = require("mod"). */
static int dolibrary(lua_State *L, const char *spec)
{
  int status;
  const char *eq = strchr(spec, '=');
  const char *modname = eq != NULL ? eq + 1 : spec;
  lua_getglobal(L, "require");
  lua_pushstring(L, modname);
  status = docall(L, 1, 1);
  if (status == LUA_OK) {
    if (eq != NULL)
      lua_pushlstring(L, spec, (size_t)(eq - spec));
    else
      lua_pushstring(L, spec);
    lua_insert(L, -2);
    lua_setglobal(L, lua_tostring(L, -2));
    lua_pop(L, 1);
  }
  return report(L, status);
}

static int pushargs(lua_State *L)
{
  int i, n;
  if (lua_getglobal(L, "arg") != LUA_TTABLE) luaL_error(L, "'arg' is not a table");
  n = (int)luaL_len(L, -1);
  luaL_checkstack(L, n + 3, "too many arguments to script");
  for (i = 1; i <= n; i++) lua_rawgeti(L, -i, i);
  lua_remove(L, -i);
  return n;
}

/* Subcommands: a script name the executable runs itself, from the library. `normlab merge
 * a.json b.json ...` puts a sweep's shards back together (lua/normlab/merge.lua); a script
 * file of that name runs as ./merge. */
static const char *subcommand(const char *name)
{
  if (strcmp(name, "merge") == 0) return "return require('normlab.merge').main(...)";
  return NULL;
}

/* Runs the script argv[0] ("-" is stdin unless it came after "--"), or the subcommand of
 * that name, with arg[1..n]. */
static int handle_script(lua_State *L, char **argv)
{
  int status;
  const char *fname = argv[0];
  const char *sub = subcommand(fname);
  if (strcmp(fname, "-") == 0 && strcmp(argv[-1], "--") != 0) fname = NULL;
  if (sub != NULL)
    status = luaL_loadbuffer(L, sub, strlen(sub), "=merge");
  else
    status = luaL_loadfilex(L, fname, "bt");
  if (status == LUA_OK) {
    int n = pushargs(L);
    status = docall(L, n, LUA_MULTRET);
  }
  return report(L, status);
}

/* ---- command line ---- */

enum {
  OPT_I = 1,       /* -i */
  OPT_E = 2,       /* at least one -e */
  OPT_VERSION = 4, /* --version, -v */
  OPT_LIST = 8,    /* --list */
  OPT_HELP = 16    /* --help, -h */
};

typedef struct options {
  unsigned flags;
  int script;         /* argv index of the script; 0 when there is none */
  int optlim;         /* first argv index that is not an option */
  const char *device; /* --device value, or NULL */
  const char *bad;    /* on error: the offending argument and why */
  const char *why;
} options;

/* cpu, cuda, cuda:N or auto. The library checks that the device exists. */
static int valid_device(const char *s)
{
  if (strcmp(s, "cpu") == 0 || strcmp(s, "cuda") == 0 || strcmp(s, "auto") == 0) return 1;
  if (strncmp(s, "cuda:", 5) != 0 || s[5] == '\0') return 0;
  return strspn(s + 5, "0123456789") == strlen(s + 5);
}

/*
 * Reads the options up to the script name. Returns 0, or -1 with o->bad and o->why set.
 * Options taking a value accept it glued ("-eprint(1)", "--device=cpu") or as the next
 * argument; unlike lua.c, a next argument starting with '-' is accepted as the value, since
 * "-e '-- x'" and negative numbers are legitimate.
 */
static int collectargs(int argc, char **argv, options *o)
{
  int i;
  memset(o, 0, sizeof *o);
  for (i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (a[0] != '-' || strcmp(a, "-") == 0) { /* the script, or stdin */
      o->script = i;
      break;
    }
    if (strcmp(a, "--") == 0) {
      o->script = i + 1 < argc ? i + 1 : 0;
      i++;
      break;
    }
    if (strcmp(a, "-i") == 0) {
      o->flags |= OPT_I;
    } else if (strcmp(a, "-v") == 0 || strcmp(a, "--version") == 0) {
      o->flags |= OPT_VERSION;
    } else if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
      o->flags |= OPT_HELP;
    } else if (strcmp(a, "--list") == 0) {
      o->flags |= OPT_LIST;
    } else if (strncmp(a, "--device", 8) == 0 && (a[8] == '\0' || a[8] == '=')) {
      const char *v = a[8] == '=' ? a + 9 : argv[++i];
      if (v == NULL) {
        o->bad = a;
        o->why = "needs a device: cpu, cuda, cuda:N or auto";
        return -1;
      }
      if (!valid_device(v)) {
        o->bad = v;
        o->why = "is not a device: expected cpu, cuda, cuda:N or auto";
        return -1;
      }
      o->device = v;
    } else if ((a[1] == 'e' || a[1] == 'l') && a[2] == '\0') {
      if (argv[i + 1] == NULL) {
        o->bad = a;
        o->why = a[1] == 'e' ? "needs a statement" : "needs a module name";
        return -1;
      }
      if (a[1] == 'e') o->flags |= OPT_E;
      i++;
    } else if (a[1] == 'e' || a[1] == 'l') {
      if (a[1] == 'e') o->flags |= OPT_E;
    } else {
      o->bad = a;
      o->why = "is not an option";
      return -1;
    }
  }
  o->optlim = o->script > 0 ? o->script : i;
  return 0;
}

/* Runs -e and -l in command-line order. Returns 0 when one of them failed. */
static int runargs(lua_State *L, char **argv, int optlim)
{
  int i;
  for (i = 1; i < optlim; i++) {
    const char *a = argv[i];
    if (strcmp(a, "--device") == 0) {
      i++; /* skip its value */
    } else if (a[0] == '-' && (a[1] == 'e' || a[1] == 'l')) {
      const char *v = a[2] != '\0' ? a + 2 : argv[++i];
      int status = a[1] == 'e' ? dostring(L, v, "=(command line)") : dolibrary(L, v);
      if (status != LUA_OK) return 0;
    }
  }
  return 1;
}

static void print_help(void)
{
  printf("normlab %s: a Lua-scriptable sandbox for GPU normalization kernels\n\n"
         "usage: %s [options] [script [args]]\n"
         "       %s merge a.json b.json ... [--json f] [--csv f] [--markdown f] [--svg f]\n"
         "         puts the JSON of a sweep's shards (an experiment's --shard I/N) back\n"
         "         together and prints the unsharded run's table (merge --help)\n"
         "  -e stat          run the Lua statement stat\n"
         "  -l mod           mod = require(\"mod\"); -l g=mod sets g instead\n"
         "  -i               enter the REPL after the script and -e\n"
         "  --device DEV     default device: cpu, cuda, cuda:N or auto (sets NORMLAB_DEVICE)\n"
         "  --list           list the variants and the dispatch settings\n"
         "  -v, --version    versions, CUDA support and the devices found\n"
         "  -h, --help       this text\n"
         "  --               stop handling options\n"
         "  -                run stdin as a script\n"
         "\n"
         "With no script and stdin a terminal, normlab opens a REPL: `nl` is\n"
         "require(\"normlab\"), expressions print their value, unfinished statements\n"
         "continue on the next line, Ctrl-C stops the running command or clears the line,\n"
         "Ctrl-D exits. With stdin not a terminal, normlab runs it as a script (-i reads\n"
         "it as REPL input instead). Scripts get their arguments in the global `arg`.\n",
         NL_VERSION, progname, progname);
}

/* ---- --version and --list: straight from the C ABI, no Lua involved ---- */

static const char *backend_name(int32_t b)
{
  return b == NL_CUDA ? "cuda" : "cpu";
}

/* A context on the CPU: settings and device queries need one; the CPU keeps --list free of
 * CUDA start-up cost. */
static nl_ctx *cpu_ctx(void)
{
  nl_device cpu = {NL_CPU, 0};
  nl_ctx *ctx = NULL;
  nl_status st = nl_ctx_new(cpu, &ctx);
  if (st != NL_OK) {
    fprintf(stderr, "%s: cannot create a context: %s\n", progname, nl_status_name(st));
    return NULL;
  }
  return ctx;
}

static int print_device(nl_ctx *ctx, nl_device dev)
{
  nl_device_info info;
  char label[32];
  const double gib = 1024.0 * 1024.0 * 1024.0, mib = 1024.0 * 1024.0;
  if (dev.backend == NL_CUDA)
    snprintf(label, sizeof label, "cuda:%d", (int)dev.index);
  else
    snprintf(label, sizeof label, "cpu");
  if (nl_device_query(ctx, dev, &info) != NL_OK) {
    printf("  %-8s error: %s\n", label, nl_ctx_last_error(ctx));
    nl_ctx_clear_error(ctx);
    return 0;
  }
  if (dev.backend == NL_CUDA)
    printf("  %-8s %s, sm_%d%d, %d SMs, %.1f GiB, L2 %.0f MiB\n", label, info.name,
           (int)info.cc_major, (int)info.cc_minor, (int)info.sm_count,
           (double)info.mem_bytes / gib, (double)info.l2_bytes / mib);
  else
    printf("  %-8s %s, %d threads, %.1f GiB, last-level cache %.0f MiB\n", label, info.name,
           (int)info.sm_count, (double)info.mem_bytes / gib, (double)info.l2_bytes / mib);
  return 1;
}

static int print_version(void)
{
  int ok = 1, i, ncuda;
  nl_ctx *ctx;
  nl_device cpu = {NL_CPU, 0};
  printf("normlab %s (core library %s)\n", NL_VERSION, nl_version());
  printf("%s\n", LUA_RELEASE);
  printf("CUDA: %s\n", nl_cuda_compiled() ? "compiled in" : "not compiled in");
  if ((ctx = cpu_ctx()) == NULL) return 0;
  printf("devices:\n");
  ok &= print_device(ctx, cpu);
  ncuda = nl_cuda_compiled() ? nl_device_count(NL_CUDA) : 0;
  for (i = 0; i < ncuda; i++) {
    nl_device dev = {NL_CUDA, i};
    ok &= print_device(ctx, dev);
  }
  if (nl_cuda_compiled() && ncuda <= 0) printf("  (no CUDA device found)\n");
  nl_ctx_free(ctx);
  return ok;
}

/* "partials,temp,atomic": the default first, then the others the variant accepts. */
static void format_reduces(const nl_variant_desc *d, char *out, size_t cap)
{
  int r;
  size_t len;
  if (d->reduces == 0) {
    snprintf(out, cap, "-");
    return;
  }
  snprintf(out, cap, "%s", nl_reduce_name(d->default_reduce));
  for (r = NL_REDUCE_TEMP; r <= NL_REDUCE_ATOMIC; r++) {
    if (r == d->default_reduce || !(d->reduces & (1u << r))) continue;
    len = strlen(out);
    snprintf(out + len, cap - len, ",%s", nl_reduce_name(r));
  }
}

/* "fp8 y (delayed, current scaling); yt: strided, external", or "" when a variant offers
 * neither an fp8 output nor a transposed copy. */
static void format_outputs(const nl_variant_desc *d, char *out, size_t cap)
{
  size_t len = 0;
  int i, n = 0;
  out[0] = '\0';
  for (i = 0; i < 2; i++)
    if (d->fp8 & (1u << i))
      len += (size_t)snprintf(out + len, cap - len, "%s%s", n++ ? ", " : "fp8 y (",
                              nl_scaling_name(i));
  if (n && len < cap)
    len += (size_t)snprintf(out + len, cap - len, " scaling)");
  n = 0;
  for (i = NL_TRANSPOSE_STRIDED; i <= NL_TRANSPOSE_CHUNKED && len < cap; i++)
    if (d->transposes & (1u << i))
      len += (size_t)snprintf(out + len, cap - len, "%s%s",
                              n++ ? ", " : len ? "; transposed copy yt: " : "transposed copy yt: ",
                              nl_transpose_name(i));
}

static int print_list(void)
{
  int32_t i, nv = nl_variant_count(), ns = nl_setting_count();
  int wname = 7, wred = 6, wkey = 7;
  char red[64], outs[160];
  nl_variant_desc d;
  nl_setting_desc s;
  nl_ctx *ctx;
  for (i = 0; i < nv; i++) { /* column widths first, so the table lines up */
    if (nl_variant_describe(i, &d) != NL_OK) continue;
    format_reduces(&d, red, sizeof red);
    if ((int)strlen(d.name) > wname) wname = (int)strlen(d.name);
    if ((int)strlen(red) > wred) wred = (int)strlen(red);
  }
  printf("%d variants (reduce: the default first, then the others accepted)\n\n", (int)nv);
  printf("%-*s  %-7s  %-*s  %s\n", wname, "VARIANT", "BACKEND", wred, "REDUCE", "SUMMARY / LIMITS");
  for (i = 0; i < nv; i++) {
    if (nl_variant_describe(i, &d) != NL_OK) continue;
    format_reduces(&d, red, sizeof red);
    printf("%-*s  %-7s  %-*s  %s\n", wname, d.name, backend_name(d.backend), wred, red,
           d.summary != NULL ? d.summary : "");
    if (d.limits != NULL && d.limits[0] != '\0')
      printf("%-*s  limits: %s\n", wname + 2 + 7 + 2 + wred, "", d.limits);
    format_outputs(&d, outs, sizeof outs);
    if (outs[0] != '\0')
      printf("%-*s  outputs: %s\n", wname + 2 + 7 + 2 + wred, "", outs);
  }
  if ((ctx = cpu_ctx()) == NULL) return 0;
  for (i = 0; i < ns; i++)
    if (nl_setting_describe(ctx, i, &s) == NL_OK && (int)strlen(s.key) > wkey)
      wkey = (int)strlen(s.key);
  printf("\n%d settings (nl.set(key, value); defaults shown)\n\n", (int)ns);
  printf("%-*s  %-10s  %-24s  %s\n", wkey, "SETTING", "DEFAULT", "RANGE", "DOC");
  for (i = 0; i < ns; i++) {
    char def[32], range[64];
    if (nl_setting_describe(ctx, i, &s) != NL_OK) continue;
    snprintf(def, sizeof def, "%.10g", s.def);
    snprintf(range, sizeof range, "[%.10g, %.10g]%s", s.min, s.max, s.integer ? " integer" : "");
    printf("%-*s  %-10s  %-24s  %s\n", wkey, s.key, def, range, s.doc != NULL ? s.doc : "");
  }
  printf("\ndefaults that differ by GPU model (launches on such a GPU take them)\n\n");
  for (i = 0; i < nl_model_default_count(); i++) {
    nl_model_default m;
    if (nl_model_default_describe(i, &m) == NL_OK)
      printf("%-8s  %-*s  %.10g\n", m.model, wkey, m.key, m.value);
  }
  nl_ctx_free(ctx);
  return 1;
}

/* ---- package paths ---- */

/* Appends "<dir>/<pattern>;" for each pattern when dir exists, once per canonical dir. */
static void add_dir(luaL_Buffer *b, const char *dir, const char *const *patterns,
                    char seen[][PATH_MAX], int *nseen) {
  char canon[PATH_MAX];
  int i;
  if (dir[0] == '\0' || realpath(dir, canon) == NULL) return;
  for (i = 0; i < *nseen; i++)
    if (strcmp(seen[i], canon) == 0) return;
  memcpy(seen[(*nseen)++], canon, sizeof canon);
  for (i = 0; patterns[i] != NULL; i++) {
    luaL_addstring(b, canon);
    luaL_addchar(b, '/');
    luaL_addstring(b, patterns[i]);
    luaL_addchar(b, ';');
  }
}

/*
 * Prepends normlab's directories to package.path and package.cpath. Paths relative to the
 * executable come first, so a build tree that was moved, or a second checkout, loads its own
 * Lua files rather than those of the tree it was compiled in; the compiled-in paths follow.
 * The usual layout is <src>/build/normlab, so <exe dir>/lua is the build's Lua directory and
 * <exe dir>/../lua the source's.
 */
static void set_paths(lua_State *L)
{
  static const char *const src_pat[] = {"?.lua", "?/init.lua", NULL};
  static const char *const build_pat[] = {"?.lua", NULL};
  static const char *const so_pat[] = {"?.so", NULL};
  char exe[PATH_MAX], exe_src[PATH_MAX + 8], exe_build[PATH_MAX + 8];
  char seen[4][PATH_MAX];
  int nseen = 0, pkg;
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  luaL_Buffer b;
  exe_src[0] = exe_build[0] = '\0';
  if (n > 0) {
    char *slash;
    exe[n] = '\0';
    if ((slash = strrchr(exe, '/')) != NULL) {
      *slash = '\0';
      snprintf(exe_src, sizeof exe_src, "%s/../lua", exe);
      snprintf(exe_build, sizeof exe_build, "%s/lua", exe);
    }
  }
  lua_getglobal(L, "package");
  pkg = lua_gettop(L);
  luaL_buffinit(L, &b);
  add_dir(&b, exe_src, src_pat, seen, &nseen);
  add_dir(&b, NL_LUA_SRC_DIR, src_pat, seen, &nseen);
  add_dir(&b, exe_build, build_pat, seen, &nseen);
  add_dir(&b, NL_LUA_BUILD_DIR, build_pat, seen, &nseen);
  luaL_pushresult(&b);
  lua_getfield(L, pkg, "path");
  lua_concat(L, 2);
  lua_setfield(L, pkg, "path");

  nseen = 0; /* cpath: the build directories only, deduplicated afresh */
  luaL_buffinit(L, &b);
  add_dir(&b, exe_build, so_pat, seen, &nseen);
  add_dir(&b, NL_LUA_BUILD_DIR, so_pat, seen, &nseen);
  luaL_pushresult(&b);
  lua_getfield(L, pkg, "cpath");
  lua_concat(L, 2);
  lua_setfield(L, pkg, "cpath");

  /* The binding is linked into this executable: preload wins over a binding_c.so on cpath,
   * so the module and the library are always the ones built together. */
  lua_getfield(L, pkg, "preload");
  lua_pushcfunction(L, open_binding);
  lua_setfield(L, -2, "normlab.binding_c");
  lua_settop(L, pkg - 1);
}

/* ---- REPL ---- */

#define REPL_EOF (-1)  /* end of input: leave the REPL */
#define REPL_INTR (-2) /* Ctrl-C at the prompt: drop the input, prompt again */

#ifdef NL_HAVE_READLINE

static volatile sig_atomic_t prompt_sigwinch;
static char *rl_line;
static int rl_have_line;
static char history_path[PATH_MAX];

static void on_sigwinch(int sig)
{
  (void)sig;
  prompt_sigwinch = 1;
}

static void rl_on_line(char *line)
{
  rl_line = line;
  rl_have_line = 1;
  rl_callback_handler_remove();
}

/*
 * Reads a line with readline's callback interface. Blocking readline() cannot be left
 * cleanly on Ctrl-C; here the signals are blocked except inside pselect, so a SIGINT
 * always ends up as EINTR in pselect (no window where it is missed), and the partial line
 * is discarded there with readline's own clean-up calls.
 */
static int read_line_rl(const char *prompt, char **line)
{
  sigset_t block, saved, wait;
  int fd = fileno(rl_instream != NULL ? rl_instream : stdin), result = REPL_EOF;
  sigemptyset(&block);
  sigaddset(&block, SIGINT);
  sigaddset(&block, SIGWINCH);
  sigprocmask(SIG_BLOCK, &block, &saved);
  wait = saved;
  sigdelset(&wait, SIGINT);
  sigdelset(&wait, SIGWINCH);
  if (prompt_sigwinch) { /* resized while a command ran */
    prompt_sigwinch = 0;
    rl_reset_screen_size();
  }
  rl_have_line = 0;
  rl_line = NULL;
  rl_callback_handler_install(prompt, rl_on_line);
  for (;;) {
    fd_set fds;
    FD_ZERO(&fds);
    FD_SET(fd, &fds);
    if (pselect(fd + 1, &fds, NULL, NULL, NULL, &wait) < 0) {
      if (errno != EINTR) {
        rl_callback_handler_remove();
        break;
      }
      if (prompt_sigwinch) {
        prompt_sigwinch = 0;
        rl_resize_terminal();
      }
      if (prompt_sigint) {
        FILE *out = rl_outstream != NULL ? rl_outstream : stdout;
        prompt_sigint = 0;
        /* "^C" after the partial line, then a new line, before readline restores the
         * terminal: that reset also moves the cursor to column 0. */
        rl_point = rl_end;
        rl_redisplay();
        fputs("^C\n", out);
        fflush(out);
        rl_free_line_state();
        rl_callback_sigcleanup();
        rl_replace_line("", 1);
        rl_callback_handler_remove();
        result = REPL_INTR;
        break;
      }
      continue;
    }
    rl_callback_read_char();
    if (rl_have_line) {
      *line = rl_line;
      result = rl_line != NULL ? 1 : REPL_EOF;
      break;
    }
  }
  sigprocmask(SIG_SETMASK, &saved, NULL);
  return result;
}

/* Readline set-up. History lives in ~/.normlab_history; each entry is appended as it is
 * made, so concurrent sessions and crashes keep what was typed. */
static void rl_open(void)
{
  const char *home = getenv("HOME");
  rl_readline_name = "normlab"; /* for $if normlab in ~/.inputrc */
  rl_catch_signals = 0;         /* normlab handles SIGINT and SIGWINCH itself */
  rl_catch_sigwinch = 0;
  setsignal(SIGWINCH, on_sigwinch, SA_RESTART);
  history_path[0] = '\0';
  if (home == NULL || home[0] == '\0') return;
  snprintf(history_path, sizeof history_path, "%s/%s", home, HISTORY_FILE);
  using_history();
  if (read_history(history_path) != 0) write_history(history_path); /* create it */
}

static void history_add(const char *text)
{
  HIST_ENTRY *last = history_get(history_base + history_length - 1);
  if (text[0] == '\0' || (last != NULL && strcmp(last->line, text) == 0)) return;
  add_history(text);
  if (history_path[0] != '\0') append_history(1, history_path);
}

static void rl_close(void)
{
  if (history_path[0] != '\0') history_truncate_file(history_path, HISTORY_MAX);
  setsignal(SIGWINCH, SIG_DFL, 0);
}

#endif /* NL_HAVE_READLINE */

/* Reads a line with plain stdio: piped input, or builds without readline. */
static int read_line_plain(const char *prompt, char **out)
{
  char *line = NULL;
  size_t cap = 0;
  ssize_t n;
  if (interactive) {
    fputs(prompt, stdout);
    fflush(stdout);
  }
  n = getline(&line, &cap, stdin);
  if (n < 0) {
    free(line);
    if (prompt_sigint) {
      prompt_sigint = 0;
      clearerr(stdin);
      if (interactive) fputc('\n', stdout);
      return REPL_INTR;
    }
    return REPL_EOF;
  }
  if (n > 0 && line[n - 1] == '\n') line[n - 1] = '\0';
  *out = line;
  return 1;
}

/* Prompts, reads a line and pushes it. Returns 1, REPL_EOF or REPL_INTR (nothing pushed). */
static int pushline(lua_State *L, int firstline)
{
  char *line = NULL;
  int r;
  const char *prompt = firstline ? PROMPT1 : PROMPT2;
  prompt_sigint = 0;
  setsignal(SIGINT, on_sigint_prompt, 0);
#ifdef NL_HAVE_READLINE
  r = interactive ? read_line_rl(prompt, &line) : read_line_plain(prompt, &line);
#else
  r = read_line_plain(prompt, &line);
#endif
  setsignal(SIGINT, SIG_DFL, 0);
  if (r != 1) return r;
  lua_pushstring(L, line);
  free(line);
  return 1;
}

/* A syntax error whose message ends in "<eof>" means the chunk is unfinished. */
static int incomplete(lua_State *L, int status)
{
  static const char mark[] = "<eof>";
  size_t len, ml = sizeof mark - 1;
  const char *msg;
  if (status != LUA_ERRSYNTAX) return 0;
  msg = lua_tolstring(L, -1, &len);
  return msg != NULL && len >= ml && strcmp(msg + len - ml, mark) == 0;
}

/*
 * Compiles the text at index 1, first as an expression ("return <text>;") so its value is
 * printed, then as a statement. Pushes the function, or the statement's error message.
 * Unlike lua.c this is tried again after every continuation line, so an expression spread
 * over lines (nl.bench{ ... }) still prints its value.
 */
static int compile_chunk(lua_State *L)
{
  size_t len;
  const char *text = lua_tolstring(L, 1, &len);
  const char *ret = lua_pushfstring(L, "return %s;", text);
  if (luaL_loadbufferx(L, ret, strlen(ret), "=stdin", "t") == LUA_OK) {
    lua_remove(L, -2);
    return LUA_OK;
  }
  lua_pop(L, 2);
  /* Text only: a line that starts with ESC (an arrow key without readline) is not bytecode. */
  return luaL_loadbufferx(L, text, len, "=stdin", "t");
}

static void checklocal(const char *line)
{
  line += strspn(line, " \t");
  if (strncmp(line, "local", 5) == 0 && (line[5] == ' ' || line[5] == '\t'))
    l_message(NULL, "warning: locals do not survive across lines in the REPL");
}

/* Reads one complete chunk, with continuation lines while it is unfinished. Returns the
 * compile status with the function or the message on top, or REPL_EOF / REPL_INTR. */
static int loadline(lua_State *L)
{
  int status, r;
  lua_settop(L, 0);
  if ((r = pushline(L, 1)) != 1) return r;
  checklocal(lua_tostring(L, 1));
  for (;;) {
    status = compile_chunk(L); /* stack: text, function or message */
    if (!incomplete(L, status)) break;
    r = pushline(L, 0);
    if (r == REPL_EOF) break; /* report the unfinished chunk's error */
    if (r == REPL_INTR) {
      lua_settop(L, 0);
      return REPL_INTR;
    }
    lua_remove(L, -2); /* the "<eof>" message */
    lua_pushliteral(L, "\n");
    lua_insert(L, -2);
    lua_concat(L, 3);
  }
#ifdef NL_HAVE_READLINE
  if (interactive) history_add(lua_tostring(L, 1));
#endif
  lua_remove(L, 1);
  return status;
}

/*
 * How the REPL shows values: tostring, except that a table without __tostring shows one
 * level of its contents, array part first, then the other keys sorted, so that
 * nl.variants()[1] or a Cmp's fields read at a glance. Written in Lua because it is
 * mostly string and table work.
 */
static const char show_src[] =
    "local MAX = 24\n"
    "local function quote(s) return (string.format('%q', s):gsub('\\\\\\n', '\\\\n')) end\n"
    "local function plain(v)\n"
    "  local mt = getmetatable(v)\n"
    "  return type(v) == 'table' and (mt == nil or (type(mt) == 'table' and mt.__tostring == nil))\n"
    "end\n"
    "local function item(v)\n"
    "  if type(v) == 'string' then return quote(v) end\n"
    "  if plain(v) then return next(v) == nil and '{}' or '{...}' end\n"
    "  return tostring(v)\n"
    "end\n"
    "local function key(k)\n"
    "  if type(k) == 'string' and k:match('^[%a_][%w_]*$') then return k end\n"
    "  return '[' .. item(k) .. ']'\n"
    "end\n"
    "local function before(a, b)\n"
    "  local ta, tb = type(a), type(b)\n"
    "  if ta ~= tb then return ta < tb end\n"
    "  if ta == 'number' or ta == 'string' then return a < b end\n"
    "  return tostring(a) < tostring(b)\n"
    "end\n"
    "local function shallow(t)\n"
    "  local parts, seq, keys = {}, 0, {}\n"
    "  while rawget(t, seq + 1) ~= nil do seq = seq + 1 end\n"
    "  for i = 1, math.min(seq, MAX) do parts[i] = item(rawget(t, i)) end\n"
    "  for k in next, t do\n"
    "    if not (math.type(k) == 'integer' and k >= 1 and k <= seq) then keys[#keys + 1] = k end\n"
    "  end\n"
    "  table.sort(keys, before)\n"
    "  for i = 1, #keys do\n"
    "    if #parts >= MAX then break end\n"
    "    parts[#parts + 1] = key(keys[i]) .. ' = ' .. item(rawget(t, keys[i]))\n"
    "  end\n"
    "  local more = seq + #keys - #parts\n"
    "  if more > 0 then parts[#parts + 1] = '... (' .. more .. ' more)' end\n"
    "  return '{' .. table.concat(parts, ', ') .. '}'\n"
    "end\n"
    "return function(...)\n"
    "  local out = {}\n"
    "  for i = 1, select('#', ...) do\n"
    "    local v = select(i, ...)\n"
    "    out[i] = plain(v) and shallow(v) or tostring(v)\n"
    "  end\n"
    "  return table.concat(out, '\\t')\n"
    "end\n";

static const char show_key = 's'; /* registry key: the address of this variable */

/* Prints the values on the stack through the show function. */
static void print_values(lua_State *L)
{
  int n = lua_gettop(L);
  if (n == 0) return;
  luaL_checkstack(L, LUA_MINSTACK, "too many results to print");
  lua_rawgetp(L, LUA_REGISTRYINDEX, &show_key);
  lua_insert(L, 1);
  if (docall(L, n, 1) != LUA_OK) {
    report(L, LUA_ERRRUN);
  } else {
    size_t len;
    const char *s = lua_tolstring(L, -1, &len);
    fwrite(s, 1, len, stdout);
    fputc('\n', stdout);
    fflush(stdout);
  }
  lua_settop(L, 0);
}

/* __index of _G while the REPL has not touched `nl` yet: the first use requires normlab,
 * so starting the REPL costs no device start-up, and a broken install shows its error
 * where `nl` is used rather than at start. */
static int lazy_nl(lua_State *L)
{
  if (lua_type(L, 2) != LUA_TSTRING || strcmp(lua_tostring(L, 2), "nl") != 0) return 0;
  lua_getglobal(L, "require");
  lua_pushliteral(L, "normlab");
  lua_call(L, 1, 1);
  lua_pushliteral(L, "nl");
  lua_pushvalue(L, -2);
  lua_rawset(L, 1);
  lua_pushnil(L);
  lua_setmetatable(L, 1);
  return 1;
}

/* Sets up `nl` unless the script already set a global nl or a metatable on _G. */
static void install_lazy_nl(lua_State *L)
{
  lua_pushglobaltable(L);
  lua_pushliteral(L, "nl");
  if (lua_rawget(L, -2) == LUA_TNIL && !lua_getmetatable(L, -2)) {
    lua_createtable(L, 0, 1);
    lua_pushcfunction(L, lazy_nl);
    lua_setfield(L, -2, "__index");
    lua_setmetatable(L, -3);
  }
  lua_settop(L, 0);
}

static void doREPL(lua_State *L)
{
  int status;
  const char *saved = progname;
  progname = NULL; /* no "normlab:" in front of errors typed at the prompt */
  interactive = isatty(STDIN_FILENO);
  lua_settop(L, 0);
  if (luaL_loadbuffer(L, show_src, sizeof show_src - 1, "=normlab.show") != LUA_OK)
    lua_error(L);
  lua_call(L, 0, 1);
  lua_rawsetp(L, LUA_REGISTRYINDEX, &show_key);
  install_lazy_nl(L);
  if (interactive) {
    printf("normlab %s, %s. nl = require(\"normlab\"). Ctrl-C stops a command, Ctrl-D exits.\n",
           NL_VERSION, LUA_RELEASE);
#ifdef NL_HAVE_READLINE
    rl_open();
#endif
  }
  while ((status = loadline(L)) != REPL_EOF) {
    if (status == REPL_INTR) continue;
    if (status == LUA_OK) status = docall(L, 0, LUA_MULTRET);
    if (status == LUA_OK)
      print_values(L);
    else
      report(L, status);
  }
  lua_settop(L, 0);
  if (interactive) {
    fputc('\n', stdout);
#ifdef NL_HAVE_READLINE
    rl_close();
#endif
  }
  fflush(stdout);
  progname = saved;
}

/* --list's last line: the tuning cache `auto` consults (normlab.tune reads it; a failure
 * there is reported, never fatal). */
static void print_tune_cache(lua_State *L)
{
  static const char chunk[] =
    "local ok, line = pcall(function() return require('normlab.tune').describe() end)\n"
    "io.write('\\n', ok and line or ('tuning cache: unavailable (' .. tostring(line) .. ')'), '\\n')\n";
  if (luaL_dostring(L, chunk) != LUA_OK) {
    fprintf(stderr, "%s: %s\n", progname, lua_tostring(L, -1));
    lua_pop(L, 1);
  }
  fflush(stdout);
}

/* ---- main ---- */

/* The whole program, run in protected mode: pushes true on success. */
static int pmain(lua_State *L)
{
  int argc = (int)lua_tointeger(L, 1);
  char **argv = (char **)lua_touserdata(L, 2);
  options o;
  int ok = 1;
  if (argv[0] != NULL && argv[0][0] != '\0') progname = argv[0];
  luaL_checkversion(L);
  if (collectargs(argc, argv, &o) != 0) {
    fprintf(stderr, "%s: '%s' %s (%s --help lists the options)\n", progname, o.bad, o.why,
            progname);
    return 0;
  }
  if (o.flags & OPT_HELP) {
    print_help();
    lua_pushboolean(L, 1);
    return 1;
  }
  /* Before anything can require normlab: the library's default device reads it. */
  if (o.device != NULL && setenv("NORMLAB_DEVICE", o.device, 1) != 0)
    return luaL_error(L, "cannot set NORMLAB_DEVICE: %s", strerror(errno));
  if (o.flags & OPT_VERSION) ok &= print_version();
  if (o.flags & OPT_LIST) ok &= print_list();
  fflush(stdout);
  if (!ok) return 0;
  luaL_openlibs(L);
  set_paths(L);
  createargtable(L, argv, argc, o.script);
  lua_gc(L, LUA_GCRESTART);
  if (o.flags & OPT_LIST) print_tune_cache(L);
  if (!runargs(L, argv, o.optlim)) return 0;
  if (o.script > 0 && handle_script(L, argv + o.script) != LUA_OK) return 0;
  if (o.flags & OPT_I) {
    doREPL(L);
  } else if (o.script == 0 && !(o.flags & (OPT_E | OPT_VERSION | OPT_LIST))) {
    if (isatty(STDIN_FILENO))
      doREPL(L);
    else if (dochunk(L, luaL_loadfilex(L, NULL, "bt")) != LUA_OK)
      return 0;
  }
  lua_pushboolean(L, 1);
  return 1;
}

int main(int argc, char **argv)
{
  int status, ok;
  lua_State *L = luaL_newstate();
  if (L == NULL) {
    l_message(argv[0], "cannot create the Lua state: not enough memory");
    return EXIT_FAILURE;
  }
  lua_gc(L, LUA_GCSTOP); /* no collections while the libraries load; pmain restarts it */
  lua_pushcfunction(L, pmain);
  lua_pushinteger(L, argc);
  lua_pushlightuserdata(L, argv);
  status = lua_pcall(L, 2, 1, 0);
  ok = lua_toboolean(L, -1);
  report(L, status);
  lua_close(L); /* before returning: finalizers free device buffers while CUDA is alive */
  return (ok && status == LUA_OK) ? EXIT_SUCCESS : EXIT_FAILURE;
}
