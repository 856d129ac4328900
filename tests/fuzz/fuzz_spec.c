/* fuzz_spec.c - libFuzzer harness for the spec loader and validator.
 *
 *   make fuzz FUZZ_SECONDS=60
 *
 * Feeds arbitrary bytes to spec_load_job through a memfd (the loader's real
 * entry point, file reading included) with data-header reads off, so a
 * fuzzed path can never make it open device files. Any crash, leak, hang or
 * sanitizer report is a bug; diagnostics are expected and ignored. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

#include "spec.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int fd = memfd_create("fuzz.yaml", 0);
    if (fd < 0)
        return 0;
    size_t off = 0;
    while (off < size) {
        ssize_t w = write(fd, data + off, size - off);
        if (w <= 0)
            break;
        off += (size_t)w;
    }
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);

    struct ddpc_job job;
    struct spec_doc *doc = NULL;
    struct ddpc_diag d;
    struct spec_options opt = { .read_data_headers = 0 };
    diag_init(&d);
    spec_load_job(path, &opt, &job, &doc, &d);
    if (doc) {
        size_t len;
        (void)spec_doc_text(doc, &len);
        (void)ddpc_job_world_size(&job, 4);
    }
    spec_doc_free(doc);
    diag_free(&d);
    close(fd);
    return 0;
}
