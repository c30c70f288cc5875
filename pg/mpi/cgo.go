//go:build mpi

package mpi

/*
#cgo pkg-config: ompi-c
#include <mpi.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>

// The Go side names dtypes and ops with small integers; these map them.
// 1 float32, 2 float64, 3 int32, 4 int64, 5 uint8, 6 uint16 (the bit
// patterns of float16 and bfloat16 when they are only moved).
static MPI_Datatype goddp_dt(int k) {
	switch (k) {
	case 1: return MPI_FLOAT;
	case 2: return MPI_DOUBLE;
	case 3: return MPI_INT32_T;
	case 4: return MPI_INT64_T;
	case 5: return MPI_UINT8_T;
	case 6: return MPI_UINT16_T;
	}
	return MPI_BYTE;
}

// goddp_u8_sum is a wrapping uint8 sum. Open MPI 4.1's op/avx component
// adds MPI_UINT8_T with saturating instructions (255 + 1 = 255; see
// open-mpi/ompi#8045, closed as wontfix), where C, c10d and the other
// backends wrap; so uint8 SUM (and AVG, a sum) goes through this op.
static MPI_Op goddp_u8_sum_op = MPI_OP_NULL;
static void goddp_u8_sum(void *in, void *inout, int *len, MPI_Datatype *dt) {
	(void)dt;
	const unsigned char *a = in;
	unsigned char *b = inout;
	for (int i = 0; i < *len; i++) b[i] = (unsigned char)(a[i] + b[i]);
}

// 0 SUM, 1 PROD, 2 MIN, 3 MAX, 4 BAND, 5 BOR, 6 BXOR, of dtype dt.
static MPI_Op goddp_op(int k, int dt) {
	if (k == 0 && dt == 5 && goddp_u8_sum_op != MPI_OP_NULL) return goddp_u8_sum_op;
	switch (k) {
	case 1: return MPI_PROD;
	case 2: return MPI_MIN;
	case 3: return MPI_MAX;
	case 4: return MPI_BAND;
	case 5: return MPI_BOR;
	case 6: return MPI_BXOR;
	}
	return MPI_SUM;
}

int goddp_init(int *provided) {
	int flag = 0;
	MPI_Initialized(&flag);
	if (flag) return -1;
	MPI_Finalized(&flag);
	if (flag) return -2;
	int rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, provided);
	if (rc != MPI_SUCCESS) return rc;
	rc = MPI_Op_create(goddp_u8_sum, 1, &goddp_u8_sum_op);
	if (rc != MPI_SUCCESS) return rc;
	MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
	return 0;
}

MPI_Comm goddp_world(void) { return MPI_COMM_WORLD; }
MPI_Comm goddp_comm_null(void) { return MPI_COMM_NULL; }
MPI_Request goddp_req_null(void) { return MPI_REQUEST_NULL; }
int goddp_undefined(void) { return MPI_UNDEFINED; }

int goddp_tag_ub(MPI_Comm c) {
	int *v = NULL, flag = 0;
	MPI_Comm_get_attr(c, MPI_TAG_UB, &v, &flag);
	return (flag && v) ? *v : 32767;
}

void goddp_error_string(int rc, char *buf, int n) {
	int len = 0;
	if (n <= 0) return;
	buf[0] = 0;
	if (MPI_Error_string(rc, buf, &len) != MPI_SUCCESS) { buf[0] = 0; return; }
	if (len >= n) len = n - 1;
	buf[len] = 0;
}

int goddp_iallreduce(void *buf, int n, int dt, int op, MPI_Comm c, MPI_Request *r) {
	return MPI_Iallreduce(MPI_IN_PLACE, buf, n, goddp_dt(dt), goddp_op(op, dt), c, r);
}
int goddp_ireduce(void *buf, int n, int dt, int op, int root, int isroot, MPI_Comm c, MPI_Request *r) {
	if (isroot) return MPI_Ireduce(MPI_IN_PLACE, buf, n, goddp_dt(dt), goddp_op(op, dt), root, c, r);
	return MPI_Ireduce(buf, NULL, n, goddp_dt(dt), goddp_op(op, dt), root, c, r);
}
int goddp_ibcast(void *buf, int n, int dt, int root, MPI_Comm c, MPI_Request *r) {
	return MPI_Ibcast(buf, n, goddp_dt(dt), root, c, r);
}
int goddp_iallgather(void *in, void *out, int n, int dt, MPI_Comm c, MPI_Request *r) {
	return MPI_Iallgather(in, n, goddp_dt(dt), out, n, goddp_dt(dt), c, r);
}
int goddp_ireduce_scatter_block(void *in, void *out, int n, int dt, int op, MPI_Comm c, MPI_Request *r) {
	return MPI_Ireduce_scatter_block(in, out, n, goddp_dt(dt), goddp_op(op, dt), c, r);
}
int goddp_igather(void *in, void *out, int n, int dt, int root, MPI_Comm c, MPI_Request *r) {
	return MPI_Igather(in, n, goddp_dt(dt), out, n, goddp_dt(dt), root, c, r);
}
int goddp_iscatter(void *in, void *out, int n, int dt, int root, MPI_Comm c, MPI_Request *r) {
	return MPI_Iscatter(in, n, goddp_dt(dt), out, n, goddp_dt(dt), root, c, r);
}
// counts and displacements live in C memory (sc, sd, rc, rd) until the
// request completes.
int goddp_ialltoallv(void *in, int *sc, int *sd, void *out, int *rc, int *rd, int dt, MPI_Comm c, MPI_Request *r) {
	return MPI_Ialltoallv(in, sc, sd, goddp_dt(dt), out, rc, rd, goddp_dt(dt), c, r);
}
int goddp_ibarrier(MPI_Comm c, MPI_Request *r) { return MPI_Ibarrier(c, r); }
int goddp_isend(void *buf, int n, int peer, int tag, MPI_Comm c, MPI_Request *r) {
	return MPI_Isend(buf, n, MPI_BYTE, peer, tag, c, r);
}
int goddp_irecv(void *buf, int n, int peer, int tag, MPI_Comm c, MPI_Request *r) {
	return MPI_Irecv(buf, n, MPI_BYTE, peer, tag, c, r);
}
// goddp_test tests r; *done is set when it finished, *count to the bytes
// received (for receives) and the result is the request's error code.
int goddp_test(MPI_Request *r, int *done, int *count) {
	MPI_Status st;
	memset(&st, 0, sizeof st);
	int rc = MPI_Test(r, done, &st);
	if (rc != MPI_SUCCESS) {
		*done = 1;
		if (rc == MPI_ERR_IN_STATUS) return st.MPI_ERROR;
		return rc;
	}
	if (*done) {
		MPI_Get_count(&st, MPI_BYTE, count);
		if (st.MPI_ERROR != MPI_SUCCESS && st.MPI_ERROR != 0 && st.MPI_SOURCE != MPI_ANY_SOURCE) {
			// Some implementations leave MPI_ERROR unset on success;
			// only MPI_ERR_TRUNCATE is reported this way for receives.
			if (st.MPI_ERROR == MPI_ERR_TRUNCATE) return MPI_ERR_TRUNCATE;
		}
	}
	return MPI_SUCCESS;
}
int goddp_err_truncate(void) { return MPI_ERR_TRUNCATE; }
int goddp_cancel(MPI_Request *r) {
	int rc = MPI_Cancel(r);
	if (rc != MPI_SUCCESS) return rc;
	return MPI_Wait(r, MPI_STATUS_IGNORE);
}
int goddp_split(MPI_Comm parent, int color, int key, MPI_Comm *out) {
	int rc = MPI_Comm_split(parent, color, key, out);
	if (rc == MPI_SUCCESS && *out != MPI_COMM_NULL) MPI_Comm_set_errhandler(*out, MPI_ERRORS_RETURN);
	return rc;
}
int goddp_dup(MPI_Comm parent, MPI_Comm *out) {
	int rc = MPI_Comm_dup(parent, out);
	if (rc == MPI_SUCCESS) MPI_Comm_set_errhandler(*out, MPI_ERRORS_RETURN);
	return rc;
}
int goddp_comm_free(MPI_Comm *c) { return MPI_Comm_free(c); }
int goddp_rank(MPI_Comm c) { int r = -1; MPI_Comm_rank(c, &r); return r; }
int goddp_size(MPI_Comm c) { int s = -1; MPI_Comm_size(c, &s); return s; }
int goddp_finalize(void) {
	if (goddp_u8_sum_op != MPI_OP_NULL) MPI_Op_free(&goddp_u8_sum_op);
	return MPI_Finalize();
}
int goddp_abort(MPI_Comm c, int code) { return MPI_Abort(c, code); }
void goddp_yield(void) { sched_yield(); }
int goddp_thread_funneled(void) { return MPI_THREAD_FUNNELED; }
void goddp_version(char *buf, int n) {
	int len = 0;
	if (n <= 0) return;
	buf[0] = 0;
	if (MPI_Get_library_version(buf, &len) != MPI_SUCCESS) { buf[0] = 0; return; }
	if (len >= n) len = n - 1;
	buf[len] = 0;
}
*/
import "C"

import (
	"fmt"
	"strings"
	"unsafe"
)

// mpiError turns an MPI error code into text.
func mpiError(rc C.int) error {
	var buf [512]C.char
	C.goddp_error_string(rc, &buf[0], C.int(len(buf)))
	return fmt.Errorf("MPI error %d: %s", int(rc), C.GoString(&buf[0]))
}

// libraryVersion is MPI_Get_library_version's first line.
func libraryVersion() string {
	buf := C.malloc(8192)
	defer C.free(buf)
	C.goddp_version((*C.char)(buf), 8192)
	s := C.GoString((*C.char)(buf))
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return strings.TrimSpace(s)
}

// cbuf is a buffer in C memory, which MPI may keep using after the cgo
// call that started a non-blocking operation returns.
type cbuf struct {
	p      unsafe.Pointer
	n      int
	pinned bool // Go memory pinned by the Work (see pin); not freed here
}

// newCbuf allocates n bytes of C memory (at least one byte, so that MPI
// always sees a valid address).
func newCbuf(n int) cbuf {
	sz := n
	if sz == 0 {
		sz = 1
	}
	p := C.malloc(C.size_t(sz))
	if p == nil {
		panic(fmt.Sprintf("mpi: cannot allocate %d bytes of C memory", n))
	}
	return cbuf{p: p, n: n}
}

func (b cbuf) bytes() []byte { return unsafe.Slice((*byte)(b.p), b.n) }

func (b *cbuf) free() {
	if b.p != nil && !b.pinned {
		C.free(b.p)
		b.p = nil
	}
}

// cints is an int array in C memory (alltoallv's counts and displacements).
type cints struct{ p *C.int }

func newCints(v []int) cints {
	p := (*C.int)(C.malloc(C.size_t(len(v)+1) * C.size_t(unsafe.Sizeof(C.int(0)))))
	s := unsafe.Slice(p, len(v))
	for i, x := range v {
		s[i] = C.int(x)
	}
	return cints{p}
}

func (c *cints) free() {
	if c.p != nil {
		C.free(unsafe.Pointer(c.p))
		c.p = nil
	}
}
