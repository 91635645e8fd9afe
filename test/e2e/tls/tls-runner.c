/* tls-runner [--thread] LIB...: dlopen(LIB, RTLD_NOW | RTLD_LOCAL) each
   argument in order and print one line per call, "ok LIB" or
   "fail LIB: <dlerror()>", carrying on after failures. With --thread a
   second thread is started first and kept blocked until the end, so the
   process is multi-threaded while the libraries load (RTLD_SINGLE_THREAD_P
   is false). Nothing is ever dlclose()d. The oracle of
   test/e2e/tls-differential.py. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

static pthread_mutex_t gate = PTHREAD_MUTEX_INITIALIZER;

static void* blocked(void* arg) {
  (void)arg;
  pthread_mutex_lock(&gate);
  pthread_mutex_unlock(&gate);
  return NULL;
}

int main(int argc, char** argv) {
  int first = 1;
  int threaded = 0;
  pthread_t thread;
  if (argc > 1 && strcmp(argv[1], "--thread") == 0) {
    pthread_mutex_lock(&gate);
    if (pthread_create(&thread, NULL, blocked, NULL) != 0) {
      fprintf(stderr, "tls-runner: pthread_create failed\n");
      return 2;
    }
    threaded = 1;
    first = 2;
  }
  for (int i = first; i < argc; i++) {
    void* h = dlopen(argv[i], RTLD_NOW | RTLD_LOCAL);
    if (h != NULL)
      printf("ok %s\n", argv[i]);
    else
      printf("fail %s: %s\n", argv[i], dlerror());
  }
  fflush(stdout);
  if (threaded) {
    pthread_mutex_unlock(&gate);
    pthread_join(thread, NULL);
  }
  return 0;
}
