#!/usr/bin/env python3
"""Splits a server's perf profile (scripts/profile-http) into what a request
does, and prints the CPU per request of each part.

    profile-http.py PERF_DATA SERVER REQUESTS DURATION_US [P50_MS P99_MS]

The samples are perf's at 999 Hz (`perf record -F 999`), self time per
symbol; each symbol falls into the first category whose pattern it matches.
"""
import re
import subprocess
import sys

HZ = 999
# (category, pattern): the first match wins; kernel and user symbols alike.
RULES = [
    ("HTTP parse and write", r"hyper::|httparse|^http::|ngx_http_parse|ngx_http_(write|header|chunked)_filter"
     r"|ngx_http_send_header|ngx_http_read_request_header|ngx_http_process_request|ngx_http_alloc_large"),
    ("routing, ServeDir, path to file", r"axum::|tower_http::|tower::|matchit|percent_encoding"
     r"|ngx_http_map_uri|ngx_http_static|ngx_http_core_|ngx_http_find|ngx_http_handler|ngx_http_update_location"),
    ("open, statx, close (kernel)", r"do_filp_open|path_openat|link_path_walk|lookup_fast|walk_component|do_sys_openat"
     r"|vfs_statx|do_statx|cp_statx|filename_lookup|path_lookupat|ext4_file_open|__fput|filp_close|dput|getname"
     r"|complete_walk|step_into|inode_permission|generic_permission|alloc_empty_file|do_dentry_open|fput|close_fd"
     r"|security_file_open|strncpy_from_user|d_alloc|lockref|ngx_open_cached|ngx_open_and_stat|__d_lookup"
     r"|may_open|generic_fillattr|ext4_getattr|errseq_sample|fdget|ngx_file_info"),
    ("the read: page cache to memory", r"filemap_read|copy_page_to_iter|_copy_to_iter|filemap_get|xas_|ext4_file_read_iter"
     r"|folio_mark_accessed|touch_atime|atime_needs_update"),
    ("sendfile/splice", r"splice|sendfile|skb_append_pagefrags|tcp_sendpage|sock_sendpage|page_cache_pipe_buf"
     r"|iov_iter_extract_pages"),
    # Loopback: the server's send wakes the client (wrk) from inside the
    # network stack (sock_def_readable); where the interrupts are enabled
    # again, the samples land.
    ("waking the client (loopback)", r"_raw_spin_unlock_irqrestore|sock_def_readable"),
    ("network stack", r"tcp_|^ip_|__ip_|ipv4|__dev_queue_xmit|dev_hard_start|loopback|net_rx|__netif|netif_|napi"
     r"|process_backlog|sock_|inet_|__skb|skb_|^sk_|__sk_|__tcp|__inet|__sys_(sendto|recvfrom|sendmsg|recvmsg)"
     r"|validate_xmit|neigh_|nf_|__napi|csum|copy_to_user|_copy_from_iter|__x64_sys_(sendto|recvfrom|writev|readv|write|read)$"
     r"|vfs_writev|do_writev|writev|sock_write_iter|sock_read_iter|security_socket|release_sock|lock_sock|__release_sock|__local_bh|do_softirq|irq_exit"),
    ("wake-ups, epoll, scheduling", r"epoll|^ep_|schedule|try_to_wake_up|futex|tokio::runtime|pick_next|enqueue|dequeue"
     r"|finish_task_switch|queued_spin|ttwu|update_curr|update_load|psi_|__wake_up|wake_up|select_task|idle|read_tsc"
     r"|ngx_epoll|ngx_process_events|hrtimer|ktime|native_sched|switch_mm|__switch_to|cpuacct|mutex|rwsem"),
    ("io_uring and the engine", r"io_uring|^io_|overlapped::|overlapped_tokio::|overlap::"),
    ("copies (user space)", r"memcpy|memmove|memset"),
    ("allocation", r"malloc|^free$|_int_free|_int_malloc|cfree|__rust_alloc|__rust_dealloc|__rdl_|alloc::|realloc"
     r"|ngx_palloc|ngx_pnalloc|ngx_pcalloc|ngx_alloc|ngx_destroy_pool|ngx_reset_pool|ngx_pfree|drop_in_place|Arc|bytes::"
     r"|kmem_cache_|kfree|__kmalloc|memcg_slab|get_page_from_freelist|free_unref|__free_pages|unlink_chunk"),
    ("system call entry and exit", r"entry_SYSCALL|do_syscall_64|syscall_exit|syscall_return|x64_sys_call|srso|__x86_return"
     r"|exit_to_user|fpregs|restore_fpregs|clear_bhb|__x86_indirect"),
]


def samples(path):
    out = subprocess.run(
        ["perf", "report", "-i", path, "--no-children", "--sort", "sym", "-n", "--stdio", "-g", "none"],
        capture_output=True, text=True, check=True).stdout
    for line in out.splitlines():
        m = re.match(r"\s*[\d.]+%\s+(\d+)\s+\[([k.])\]\s+(.*\S)", line)
        if m:
            yield int(m.group(1)), m.group(2) == "k", m.group(3)


def main():
    data, server, requests, duration_us = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    tail = f", p50 {sys.argv[5]} ms, p99 {sys.argv[6]} ms" if len(sys.argv) > 6 else ""
    by = {}
    total = 0
    for n, kernel, sym in samples(data):
        total += n
        cat = next((c for c, pat in RULES if re.search(pat, sym)), "other (kernel)" if kernel else "other (user space)")
        by[cat] = by.get(cat, 0) + n
    secs = duration_us / 1e6
    print(f"{server}: {requests / secs:,.0f} requests/s{tail}; {total / HZ / secs:.2f} CPUs busy,"
          f" {total / HZ / requests * 1e6:.1f} us of CPU per request")
    for cat, n in sorted(by.items(), key=lambda kv: -kv[1]):
        print(f"  {cat:<34} {n / HZ / requests * 1e6:6.2f} us  {100 * n / total:5.1f}%")


if __name__ == "__main__":
    main()
