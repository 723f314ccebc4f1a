/* go-faiss includes this header; Tandem declares all extensions in tandem_ex_c.h. */
#ifndef TANDEM_INDEXBINARY_C_EX_H
#define TANDEM_INDEXBINARY_C_EX_H
#include <faiss/c_api/tandem_ex_c.h>
#endif
