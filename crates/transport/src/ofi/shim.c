/* The part of libfabric GustFS calls, as plain functions Rust can link to.
 *
 * Most of libfabric's API is static inline functions in its headers that call
 * through a provider's operation tables (fi_send, fi_cq_read, fi_endpoint...), which
 * no foreign-function interface can name; this file wraps the few GustFS uses. The
 * library itself is opened with dlopen at first use, not linked: every process the
 * preload library runs in would otherwise load libfabric and the verbs, PSM and
 * netlink libraries it depends on, for nothing unless an instance uses a fabric.
 *
 * One endpoint per process and provider: reliable datagrams (FI_EP_RDM), messages
 * only (FI_MSG), send-after-send ordering (FI_ORDER_SAS, so the pieces of one
 * stream arrive in order), thread safe (the Rust side sends from any thread while
 * one thread reads the completion queue). Each operation carries a 64-bit token,
 * returned with its completion. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_eq.h>

#define GUST_OFI_API FI_VERSION(1, 9)

static int (*p_getinfo)(uint32_t, const char *, const char *, uint64_t, const struct fi_info *, struct fi_info **);
static void (*p_freeinfo)(struct fi_info *);
static struct fi_info *(*p_dupinfo)(const struct fi_info *);
static int (*p_fabric)(struct fi_fabric_attr *, struct fid_fabric **, void *);
static const char *(*p_strerror)(int);

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static char load_error[256];

static void load(void) {
    void *h = dlopen("libfabric.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(load_error, sizeof load_error, "cannot load libfabric (libfabric.so.1): %s", dlerror());
        return;
    }
    p_getinfo = dlsym(h, "fi_getinfo");
    p_freeinfo = dlsym(h, "fi_freeinfo");
    p_dupinfo = dlsym(h, "fi_dupinfo");
    p_fabric = dlsym(h, "fi_fabric");
    p_strerror = dlsym(h, "fi_strerror");
    if (!p_getinfo || !p_freeinfo || !p_dupinfo || !p_fabric || !p_strerror) {
        snprintf(load_error, sizeof load_error, "libfabric.so.1 lacks fi_getinfo, fi_fabric or fi_strerror");
        p_getinfo = NULL;
    }
}

/* NULL when libfabric is there; otherwise why not. */
const char *gust_ofi_load(void) {
    pthread_once(&load_once, load);
    return p_getinfo ? NULL : load_error;
}

const char *gust_ofi_strerror(int err) {
    if (gust_ofi_load())
        return "libfabric not loaded";
    return p_strerror(err < 0 ? -err : err);
}

struct gust_ofi {
    struct fi_info *info;
    struct fid_fabric *fabric;
    struct fid_domain *domain;
    struct fid_av *av;
    struct fid_cq *cq;
    struct fid_ep *ep;
    int waits; /* the completion queue has a wait object (fi_cq_sread works) */
};

/* What an operation's completion hands back: libfabric's context space first (the
 * FI_CONTEXT2 mode some providers ask for), then the caller's token. */
struct op {
    struct fi_context2 ctx;
    uint64_t token;
};

/* One completion, as the Rust side reads it. */
struct gust_ofi_event {
    uint64_t token;
    uint64_t len;   /* bytes received (receives) */
    int32_t is_recv;
    int32_t err;    /* 0, or a positive libfabric error number */
};

static void close_all(struct gust_ofi *o) {
    if (o->ep)
        fi_close(&o->ep->fid);
    if (o->av)
        fi_close(&o->av->fid);
    if (o->cq)
        fi_close(&o->cq->fid);
    if (o->domain)
        fi_close(&o->domain->fid);
    if (o->fabric)
        fi_close(&o->fabric->fid);
    if (o->info)
        p_freeinfo(o->info);
    free(o);
}

#define TRY(step, call)                                                                   \
    do {                                                                                  \
        int rc_ = (call);                                                                 \
        if (rc_) {                                                                        \
            snprintf(err, errlen, "%s: %s", step, p_strerror(-rc_));                      \
            close_all(o);                                                                 \
            return rc_ < 0 ? rc_ : -rc_;                                                  \
        }                                                                                 \
    } while (0)

/* A queue the progress thread can sleep on (FI_WAIT_UNSPEC) where `wait` is set;
 * shm's waits spin, so it is asked for none and polled. */
static int open_cq(struct gust_ofi *o, int wait) {
    struct fi_cq_attr cq = {0};
    cq.format = FI_CQ_FORMAT_DATA;
    cq.size = 1024;
    cq.wait_obj = FI_WAIT_UNSPEC;
    if (wait && fi_cq_open(o->domain, &cq, &o->cq, NULL) == 0) {
        o->waits = 1;
        return 0;
    }
    cq.wait_obj = FI_WAIT_NONE;
    return fi_cq_open(o->domain, &cq, &o->cq, NULL);
}

/* Opens an endpoint of `provider` (e.g. "tcp;ofi_rxm", "shm"), bound to `node`
 * (an address of this host, or NULL: the provider's choice), with a completion
 * queue that can be waited on if `wait` (and the provider offers one). 0, or a negative
 * libfabric error with the reason in `err`. */
int gust_ofi_open(const char *provider, const char *node, int wait, struct gust_ofi **out, char *err, size_t errlen) {
    const char *why = gust_ofi_load();
    if (why) {
        snprintf(err, errlen, "%s", why);
        return -FI_ENOSYS;
    }
    struct fi_info *hints = p_dupinfo(NULL);
    if (!hints) {
        snprintf(err, errlen, "out of memory");
        return -FI_ENOMEM;
    }
    hints->caps = FI_MSG;
    hints->mode = FI_CONTEXT | FI_CONTEXT2;
    hints->ep_attr->type = FI_EP_RDM;
    hints->tx_attr->msg_order = FI_ORDER_SAS;
    hints->rx_attr->msg_order = FI_ORDER_SAS;
    hints->domain_attr->threading = FI_THREAD_SAFE;
    hints->domain_attr->mr_mode = FI_MR_UNSPEC;
    hints->fabric_attr->prov_name = strdup(provider);
    struct gust_ofi *o = calloc(1, sizeof *o);
    int rc = p_getinfo(GUST_OFI_API, node, NULL, node ? FI_SOURCE : 0, hints, &o->info);
    p_freeinfo(hints);
    if (rc) {
        snprintf(err, errlen, "no '%s' endpoint%s%s: %s", provider, node ? " at " : "", node ? node : "",
                 p_strerror(-rc));
        o->info = NULL;
        close_all(o);
        return rc;
    }
    TRY("fi_fabric", p_fabric(o->info->fabric_attr, &o->fabric, NULL));
    TRY("fi_domain", fi_domain(o->fabric, o->info, &o->domain, NULL));
    TRY("fi_cq_open", open_cq(o, wait));
    struct fi_av_attr av = {0};
    av.type = FI_AV_TABLE;
    TRY("fi_av_open", fi_av_open(o->domain, &av, &o->av, NULL));
    TRY("fi_endpoint", fi_endpoint(o->domain, o->info, &o->ep, NULL));
    TRY("fi_ep_bind (queue)", fi_ep_bind(o->ep, &o->cq->fid, FI_TRANSMIT | FI_RECV));
    TRY("fi_ep_bind (addresses)", fi_ep_bind(o->ep, &o->av->fid, 0));
    TRY("fi_enable", fi_enable(o->ep));
    *out = o;
    return 0;
}

void gust_ofi_close(struct gust_ofi *o) {
    close_all(o);
}

/* 1: addresses are socket addresses (IP providers); 2: strings (shm); 0: other. */
int gust_ofi_addr_kind(const struct gust_ofi *o) {
    switch (o->info->addr_format) {
    case FI_SOCKADDR:
    case FI_SOCKADDR_IN:
    case FI_SOCKADDR_IN6:
        return 1;
    case FI_ADDR_STR:
        return 2;
    default:
        return 0;
    }
}

uint64_t gust_ofi_max_msg(const struct gust_ofi *o) {
    return o->info->ep_attr->max_msg_size;
}

int gust_ofi_waits(const struct gust_ofi *o) {
    return o->waits;
}

/* Wakes a thread waiting in gust_ofi_poll (a waiting reader takes over from the
 * background thread). */
void gust_ofi_signal(struct gust_ofi *o) {
    if (o->waits)
        fi_cq_signal(o->cq);
}

/* This endpoint's address in `buf` (its length in *len, in and out). */
int gust_ofi_name(struct gust_ofi *o, void *buf, size_t *len) {
    return fi_getname(&o->ep->fid, buf, len);
}

/* Inserts one peer address; its handle in *handle. */
int gust_ofi_insert(struct gust_ofi *o, const void *addr, uint64_t *handle) {
    fi_addr_t a = FI_ADDR_NOTAVAIL;
    int n = fi_av_insert(o->av, addr, 1, &a, 0, NULL);
    if (n != 1)
        return n < 0 ? n : -FI_EINVAL;
    *handle = a;
    return 0;
}

static struct op *new_op(uint64_t token) {
    struct op *p = calloc(1, sizeof *p);
    if (p)
        p->token = token;
    return p;
}

/* Posts a send; its completion carries `token`. -FI_EAGAIN: try again later. */
ssize_t gust_ofi_send(struct gust_ofi *o, const void *buf, size_t len, uint64_t dest, uint64_t token) {
    struct op *p = new_op(token);
    if (!p)
        return -FI_ENOMEM;
    ssize_t rc = fi_send(o->ep, buf, len, NULL, dest, p);
    if (rc)
        free(p);
    return rc;
}

/* Posts a receive buffer from any peer; its completion carries `token`. */
ssize_t gust_ofi_recv(struct gust_ofi *o, void *buf, size_t len, uint64_t token) {
    struct op *p = new_op(token);
    if (!p)
        return -FI_ENOMEM;
    ssize_t rc = fi_recv(o->ep, buf, len, NULL, FI_ADDR_UNSPEC, p);
    if (rc)
        free(p);
    return rc;
}

/* Up to `n` completions into `ev`, waiting at most `timeout_ms` for the first
 * (where the queue can wait; otherwise it returns at once). The number read, 0, or
 * a negative error of the queue itself. */
ssize_t gust_ofi_poll(struct gust_ofi *o, struct gust_ofi_event *ev, size_t n, int timeout_ms) {
    struct fi_cq_data_entry e[16];
    if (n > 16)
        n = 16;
    ssize_t got = o->waits && timeout_ms > 0 ? fi_cq_sread(o->cq, e, n, NULL, timeout_ms) : fi_cq_read(o->cq, e, n);
    if (got == -FI_EAGAIN || got == -FI_EINTR)
        return 0;
    if (got == -FI_EAVAIL) {
        struct fi_cq_err_entry ee = {0};
        if (fi_cq_readerr(o->cq, &ee, 0) != 1)
            return 0;
        struct op *p = ee.op_context;
        ev[0].token = p ? p->token : 0;
        ev[0].len = 0;
        ev[0].is_recv = (ee.flags & FI_RECV) != 0;
        ev[0].err = ee.err ? ee.err : FI_EIO;
        free(p);
        return 1;
    }
    if (got < 0)
        return got;
    for (ssize_t i = 0; i < got; i++) {
        struct op *p = e[i].op_context;
        ev[i].token = p ? p->token : 0;
        ev[i].len = e[i].len;
        ev[i].is_recv = (e[i].flags & FI_RECV) != 0;
        ev[i].err = 0;
        free(p);
    }
    return got;
}
