/* Read the first 4 KiB of a file through a completion port. */
#include <overlap.h>
#include <stdio.h>

int main(int argc, char **argv) {
    overlap_engine *engine;
    overlap_file *file;
    overlap_port *port;
    overlap_completion c;
    static char buf[4096];
    if (argc != 2 || overlap_engine_create(NULL, &engine) < 0 ||
        overlap_file_open(engine, argv[1], OVERLAP_OPEN_READ, 0, &file) < 0 ||
        overlap_port_create(engine, 0, &port) < 0 ||
        overlap_port_read(port, file, buf, sizeof buf, 0, 42) < 0 || /* user datum 42 */
        overlap_port_wait(port, &c, 1, 1, -1) != 1) {                /* no timeout */
        fprintf(stderr, "hello: %s\n", argc != 2 ? "usage: hello FILE" : overlap_last_error());
        return 2;
    }
    printf("read %lld bytes (user datum %llu)\n", (long long)c.result, (unsigned long long)c.user_data);
    overlap_port_free(port);
    overlap_file_free(file);
    overlap_engine_free(engine);
    return 0;
}
