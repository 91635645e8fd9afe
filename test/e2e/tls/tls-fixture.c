/* One fixture library for test/e2e/tls-differential.py, shaped by macros:

     -DVAR=v -DSIZE=n -DALIGN=a   a thread-local array v[n] aligned to a
     -DIE=1                       ... accessed with the initial-exec model
                                  (R_X86_64_TPOFF64: dlopen needs static TLS)
     -DIE=0                       ... accessed with the default model; built
                                  with -mtls-dialect=gnu2 this gives
                                  R_X86_64_TLSDESC (static TLS only from the
                                  optional budget), otherwise general dynamic
     -DVAR2=w -DSIZE2=n -DALIGN2=a  a second initial-exec array
     -DREF=v -DREFSIZE=n          an initial-exec reference to the array v of
                                  another library (linked as DT_NEEDED), so a
                                  failure names that library, not this one

   Each array gets an accessor so the access really is compiled in. */
#define PASTE2(a, b) a##b
#define PASTE(a, b) PASTE2(a, b)

#ifdef VAR
#if IE
#define VAR_MODEL __attribute__((tls_model("initial-exec")))
#else
#define VAR_MODEL
#endif
VAR_MODEL __thread char VAR[SIZE] __attribute__((aligned(ALIGN)));
char* PASTE(get_, VAR)(void) { return VAR; }
#endif

#ifdef VAR2
__attribute__((tls_model("initial-exec"))) __thread char VAR2[SIZE2]
    __attribute__((aligned(ALIGN2)));
char* PASTE(get_, VAR2)(void) { return VAR2; }
#endif

#ifdef REF
extern __thread char REF[REFSIZE] __attribute__((tls_model("initial-exec")));
char* PASTE(ref_, REF)(void) { return REF; }
#endif
