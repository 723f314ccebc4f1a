/* go-faiss includes this header; Tandem declares all extensions in tandem_ex_c.h. */
#ifndef TANDEM_UTILS_UTILS_C_H
#define TANDEM_UTILS_UTILS_C_H
#include <faiss/c_api/tandem_ex_c.h>
#endif
