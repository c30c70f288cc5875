#ifndef GODDP_MPI_H
#define GODDP_MPI_H
#include <mpi.h>
int goddp_init(int *provided);
MPI_Comm goddp_world(void);
MPI_Comm goddp_comm_null(void);
MPI_Request goddp_req_null(void);
int goddp_undefined(void);
int goddp_tag_ub(MPI_Comm c);
void goddp_error_string(int rc, char *buf, int n);
int goddp_iallreduce(void *buf, int n, int dt, int op, MPI_Comm c, MPI_Request *r);
int goddp_ireduce(void *buf, int n, int dt, int op, int root, int isroot, MPI_Comm c, MPI_Request *r);
int goddp_ibcast(void *buf, int n, int dt, int root, MPI_Comm c, MPI_Request *r);
int goddp_iallgather(void *in, void *out, int n, int dt, MPI_Comm c, MPI_Request *r);
int goddp_ireduce_scatter_block(void *in, void *out, int n, int dt, int op, MPI_Comm c, MPI_Request *r);
int goddp_igather(void *in, void *out, int n, int dt, int root, MPI_Comm c, MPI_Request *r);
int goddp_iscatter(void *in, void *out, int n, int dt, int root, MPI_Comm c, MPI_Request *r);
int goddp_ialltoallv(void *in, int *sc, int *sd, void *out, int *rc, int *rd, int dt, MPI_Comm c, MPI_Request *r);
int goddp_ibarrier(MPI_Comm c, MPI_Request *r);
int goddp_isend(void *buf, int n, int peer, int tag, MPI_Comm c, MPI_Request *r);
int goddp_irecv(void *buf, int n, int peer, int tag, MPI_Comm c, MPI_Request *r);
int goddp_test(MPI_Request *r, int *done, int *count);
int goddp_err_truncate(void);
int goddp_cancel(MPI_Request *r);
int goddp_split(MPI_Comm parent, int color, int key, MPI_Comm *out);
int goddp_dup(MPI_Comm parent, MPI_Comm *out);
int goddp_comm_free(MPI_Comm *c);
int goddp_rank(MPI_Comm c);
int goddp_size(MPI_Comm c);
int goddp_finalize(void);
int goddp_abort(MPI_Comm c, int code);
int goddp_thread_funneled(void);
void goddp_version(char *buf, int n);
void goddp_yield(void);
#endif
