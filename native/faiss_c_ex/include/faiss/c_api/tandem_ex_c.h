/*
 * Tandem's extension of the FAISS 1.7.3 C API.
 *
 * github.com/blevesearch/go-faiss v1.1.5 is written against a FAISS fork whose
 * C API has functions that upstream FAISS 1.7.3 lacks. This header declares
 * them with the signatures go-faiss's Go code calls; faiss_c_ex.cpp implements
 * them over FAISS 1.7.3. Every function returns 0 on success and a non-zero
 * code on failure, with the message available from faiss_get_last_error(),
 * unless it is a plain getter.
 *
 * Known limits (FAISS 1.7.3):
 *  - RaBitQ does not exist: faiss_IndexIVF_has_RaBitQ always answers 1 ("no";
 *    go-faiss reads 0 as "has RaBitQ") and faiss_SearchParametersRaBitQ_new_with
 *    fails with an error.
 *  - IndexIDMap/IndexIDMap2 reject search parameters; search_with_params
 *    translates the selector to the sub-index's internal ids instead.
 *  - HNSW applies a selector only to the result set, so under a restrictive
 *    selector it may return fewer than k results, padded with label -1.
 *  - Binary indexes do not honour selectors in 1.7.3: a binary search with a
 *    selector fails with an error rather than ignoring it.
 *  - Reading an index from a buffer cannot memory-map it: the mmap flags fail.
 */
#ifndef TANDEM_FAISS_EX_C_H
#define TANDEM_FAISS_EX_C_H

#include <stddef.h>
#include <stdint.h>

#include <faiss/c_api/faiss_c.h>
#include <faiss/c_api/Index_c.h>
#include <faiss/c_api/IndexIVF_c.h>
#include <faiss/c_api/IndexBinary_c.h>
#include <faiss/c_api/impl/AuxIndexStructures_c.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- selectors ---- */

FAISS_DECLARE_CLASS_INHERITED(IDSelectorBitmap, IDSelector)
FAISS_DECLARE_CLASS_INHERITED(IDSelectorNot, IDSelector)

/* faiss_IDSelectorBitmap_new selects id i when bit (i&7) of bitmap[i>>3] is
 * set. The bitmap is copied: the caller may free or move it at once. */
int faiss_IDSelectorBitmap_new(
        FaissIDSelectorBitmap** p_sel,
        size_t n,
        const uint8_t* bitmap);

/* faiss_IDSelectorBitmapShifted_new selects id i when bit of i >> shift is
 * set in bitmap (as for faiss_IDSelectorBitmap_new): a bitmap of
 * documents selecting their token ids. The bitmap is copied. */
int faiss_IDSelectorBitmapShifted_new(
        FaissIDSelector** p_sel,
        size_t n,
        const uint8_t* bitmap,
        int shift);

/* faiss_IDSelectorNot_new selects the ids that sel does not select. sel is
 * not owned: it must outlive the new selector and be freed separately. */
int faiss_IDSelectorNot_new(FaissIDSelectorNot** p_sel, const FaissIDSelector* sel);

/* ---- search parameters ---- */

FAISS_DECLARE_CLASS(SearchParameters)
FAISS_DECLARE_CLASS_INHERITED(SearchParametersIVF, SearchParameters)

/* sel may be NULL and is not owned. */
int faiss_SearchParameters_new(FaissSearchParameters** p_sp, FaissIDSelector* sel);
int faiss_SearchParametersIVF_new_with(
        FaissSearchParameters** p_sp,
        FaissIDSelector* sel,
        size_t nprobe,
        size_t max_codes);
/* Always fails in FAISS 1.7.3, which has no RaBitQ. */
int faiss_SearchParametersRaBitQ_new_with(
        FaissSearchParameters** p_sp,
        FaissIDSelector* sel,
        size_t nprobe,
        size_t max_codes);
/* Returns the nprobe of IVF parameters, 0 for other parameters. */
size_t faiss_SearchParametersIVF_nprobe(const FaissSearchParameters* sp);
void faiss_SearchParameters_free(FaissSearchParameters* sp);

/* ---- Index ---- */

int faiss_Index_search_with_params(
        const FaissIndex* index,
        idx_t n,
        const float* x,
        idx_t k,
        const FaissSearchParameters* params,
        float* distances,
        idx_t* labels);
/* Approximate heap bytes held by the index (codes, ids, graph, lists). */
int faiss_Index_size(const FaissIndex* index, size_t* size);
int faiss_Index_reconstruct_batch(
        const FaissIndex* index,
        idx_t n,
        const idx_t* keys,
        float* recons);
int faiss_Index_merge_from(FaissIndex* index, FaissIndex* other, idx_t add_id);
/* Distances between one query and the stored vectors with the given ids,
 * in the index's metric. */
int faiss_Index_dist_compute(
        const FaissIndex* index,
        const float* query,
        const idx_t* ids,
        size_t n,
        float* distances);
/* The vectors of a flat index (IndexFlat, or an IndexIDMap(2) over one):
 * *xb points at its *n rows of d floats, and *ids at their ids (NULL when
 * the index is not wrapped: the ids are the row numbers). For any other
 * index, *xb is NULL and *n 0. The pointers stay valid until the index is
 * next changed. */
int faiss_IndexFlat_data(
        const FaissIndex* index,
        const float** xb,
        const idx_t** ids,
        idx_t* n);
/* Shares the trained state of src (IVF coarse quantizer, or scalar quantizer)
 * with index, which must be empty and of the same kind and dimension. */
int faiss_Set_quantizers(FaissIndex* index, FaissIndex* src);

/* ---- IndexIVF ---- */

int faiss_IndexIVF_set_direct_map(FaissIndexIVF* index, int direct_map_type);

/* Tandem: located IVF indexes. The caller keeps each vector's location,
 * list << 32 | offset, by id (Tandem's dense index keeps it in a paged
 * array by document number); the index itself keeps no direct map. */

/* Adds n vectors with ids, as add_core with each vector's list given
 * (assign[i] is the list of vector i, as faiss_IndexIVF_assign computes
 * it), and reports the location of each: out_ids and out_lo receive n
 * pairs (in no particular order). */
int faiss_IndexIVF_add_located_assigned(
        FaissIndex* index, idx_t n, const float* x, const idx_t* ids, const idx_t* assign,
        idx_t* out_ids, uint64_t* out_lo);

/* Assigns n vectors to their nearest lists by the IVF's quantizer (its
 * assign). It only reads the index: callers may assign slices of a batch
 * from several threads at once, which is how Tandem uses every core. */
int faiss_IndexIVF_assign(const FaissIndex* index, idx_t n, const float* x, idx_t* assign);

/* Trains an IVF index as train does, with the k-means assignment of its
 * coarse quantizer spread over threads (a threaded IndexShards of flat
 * indexes of its metric as the clustering index). threads <= 1 is train. */
int faiss_IndexIVF_train_threaded(FaissIndex* index, idx_t n, const float* x, int threads);

/* Removes the vectors with ids at their locations lo (each checked: a
 * location holding another id is an error and nothing after it is
 * removed). The last vector of a list moves into a removed one's place:
 * the final locations of the vectors that moved are reported in moved_ids
 * and moved_lo (at most n; *n_moved of them). The index must have no
 * direct map. */
int faiss_IndexIVF_remove_located(
        FaissIndex* index,
        idx_t n,
        const idx_t* ids,
        const uint64_t* lo,
        idx_t* moved_ids,
        uint64_t* moved_lo,
        size_t* n_moved);

/* Reports every vector's id and location: ntotal pairs. */
int faiss_IndexIVF_locate_all(const FaissIndex* index, idx_t* out_ids, uint64_t* out_lo);

/* The k best for one query x of the vectors with the n ids (ascending),
 * at the locations the caller keeps in pages of 2^page_bits slots by id
 * (slot = location + 1, 0 for an id without a vector; a null page has
 * none): ids without a location are skipped. The codes are scored as an
 * IVF search scores them (8-bit scalar codes by inner product to float
 * rounding, others by the index's own scanner), on OpenMP's threads when
 * n is large. The cost is in n, not in the size of the index, which makes
 * a selective filter cheap. With 0 < nprobe < the index's lists (and a
 * flat coarse quantizer), only the ids in the nprobe lists nearest x are
 * scored: the candidates of an IVF search probing those lists under the
 * ids as a filter, without reading the other ids' codes. distances and
 * labels hold k values, best first; unfilled slots have label -1. */
int faiss_IndexIVF_search_located(
        const FaissIndex* index,
        const float* x,
        idx_t n,
        const uint64_t* ids,
        const uint64_t* const* pages,
        size_t npages,
        int page_bits,
        idx_t nprobe,
        idx_t k,
        float* distances,
        idx_t* labels);

/* sum_j w[j] * c[j]: the kernel search_located scores 8-bit codes with
 * (AVX2 where the CPU has it), or with portable != 0 the portable one. For
 * tests. */
float faiss_tandem_dot_u8(const float* w, const uint8_t* c, size_t d, int portable);

/* Answers 1: FAISS 1.7.3 has no RaBitQ. Accepts any index. */
int faiss_IndexIVF_has_RaBitQ(const FaissIndex* index);
int faiss_IndexIVF_list_vector_count(
        const FaissIndexIVF* index,
        idx_t* list_counts,
        size_t nlist,
        const FaissSearchParameters* params);
int faiss_IndexIVF_search_closest_eligible_centroids(
        const FaissIndexIVF* index,
        idx_t n,
        const float* x,
        idx_t k,
        float* centroid_distances,
        idx_t* centroid_ids,
        const FaissSearchParameters* params);
int faiss_IndexIVF_search_preassigned_with_params(
        const FaissIndexIVF* index,
        idx_t n,
        const float* x,
        idx_t k,
        const idx_t* assign,
        const float* centroid_dis,
        float* distances,
        idx_t* labels,
        int store_pairs,
        const FaissSearchParameters* params);
/* Copies the nlist centroids (nlist*d floats) and the size of each list.
 * centroid_ids, when not NULL, receives 0..nlist-1. */
int faiss_IndexIVF_get_centroids_and_cardinality(
        const FaissIndexIVF* index,
        float* centroids,
        size_t* cardinalities,
        idx_t* centroid_ids);

/* ---- IndexBinary ---- */

FAISS_DECLARE_CLASS_INHERITED(IndexBinaryIVF, IndexBinary)

int faiss_index_binary_factory(FaissIndexBinary** p_index, int d, const char* description);
int faiss_IndexBinary_search_with_params(
        const FaissIndexBinary* index,
        idx_t n,
        const uint8_t* x,
        idx_t k,
        const FaissSearchParameters* params,
        int32_t* distances,
        idx_t* labels);
int faiss_IndexBinary_size(const FaissIndexBinary* index, size_t* size);
int faiss_IndexBinary_sa_code_size(const FaissIndexBinary* index, size_t* size);
int faiss_Set_quantizers_binary(FaissIndexBinary* index, FaissIndexBinary* src);

FaissIndexBinaryIVF* faiss_IndexBinaryIVF_cast(FaissIndexBinary* index);
size_t faiss_IndexBinaryIVF_nlist(const FaissIndexBinaryIVF* index);
size_t faiss_IndexBinaryIVF_nprobe(const FaissIndexBinaryIVF* index);
void faiss_IndexBinaryIVF_set_nprobe(FaissIndexBinaryIVF* index, size_t nprobe);
int faiss_IndexBinaryIVF_set_direct_map(FaissIndexBinaryIVF* index, int direct_map_type);
int faiss_IndexBinaryIVF_merge_from(FaissIndexBinary* index, FaissIndexBinary* other, idx_t add_id);
int faiss_IndexBinaryIVF_list_vector_count(
        const FaissIndexBinaryIVF* index,
        idx_t* list_counts,
        size_t nlist,
        const FaissSearchParameters* params);
int faiss_IndexBinaryIVF_search_closest_eligible_centroids(
        const FaissIndexBinaryIVF* index,
        idx_t n,
        const uint8_t* x,
        idx_t k,
        int32_t* centroid_distances,
        idx_t* centroid_ids,
        const FaissSearchParameters* params);
int faiss_IndexBinaryIVF_search_preassigned_with_params(
        const FaissIndexBinaryIVF* index,
        idx_t n,
        const uint8_t* x,
        idx_t k,
        const idx_t* assign,
        const int32_t* centroid_dis,
        int32_t* distances,
        idx_t* labels,
        int store_pairs,
        const FaissSearchParameters* params);
int faiss_IndexBinaryIVF_get_centroids_and_cardinality(
        const FaissIndexBinaryIVF* index,
        uint8_t* centroids,
        size_t* cardinalities,
        idx_t* centroid_ids);

/* ---- serialisation to memory ---- */

/* FAISS 1.7.3's own flags are 1 (mmap) and 2 (read only); go-faiss also names
 * these fork flags. Reading from a buffer rejects the mmap-like ones. */
#ifndef FAISS_IO_FLAG_ONDISK_IVF
#define FAISS_IO_FLAG_ONDISK_IVF 0x10000
#endif
#ifndef FAISS_IO_FLAG_READ_MMAP
#define FAISS_IO_FLAG_READ_MMAP 0x20000
#endif
#ifndef FAISS_IO_FLAG_SKIP_PREFETCH
#define FAISS_IO_FLAG_SKIP_PREFETCH 0x40000
#endif

/* *buf is allocated with malloc and freed with faiss_free_buf. */
int faiss_write_index_buf(const FaissIndex* index, size_t* size, unsigned char** buf);
int faiss_read_index_buf(const unsigned char* buf, size_t size, int io_flags, FaissIndex** p_out);
int faiss_write_index_binary_buf(const FaissIndexBinary* index, size_t* size, unsigned char** buf);
int faiss_read_index_binary_buf(
        const unsigned char* buf,
        size_t size,
        int io_flags,
        FaissIndexBinary** p_out);
void faiss_free_buf(unsigned char** buf);

/* tandem_io_fn moves n bytes between FAISS and its caller through ptr: a
 * reader's fills it, a writer's consumes it. It returns the bytes moved;
 * fewer than n is an error, which the caller keeps by its handle. */
typedef size_t (*tandem_io_fn)(uintptr_t handle, void* ptr, size_t n);

/* faiss_write_index_stream writes index in FAISS's format through fn, and
 * faiss_read_index_stream reads one: neither holds a copy of the whole
 * serialisation, as the _buf functions do. io_flags as for the _buf
 * functions. */
int faiss_write_index_stream(const FaissIndex* index, tandem_io_fn fn, uintptr_t handle);
int faiss_read_index_stream(tandem_io_fn fn, uintptr_t handle, int io_flags, FaissIndex** p_out);

/* ---- utilities ---- */

/* Binarises n vectors of dimension d (a multiple of 8): bit j is x[j] > 0. */
int faiss_real_to_binary(size_t n, size_t d, const float* x, uint8_t* out);
/* Sets the number of OpenMP threads FAISS uses. */
void faiss_set_omp_threads(unsigned int n);

#ifdef __cplusplus
}
#endif

#endif /* TANDEM_FAISS_EX_C_H */
