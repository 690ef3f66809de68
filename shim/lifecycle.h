/* SPDX-License-Identifier: Apache-2.0 */
/* liblynx.so's state after its lazy initialisation (lifecycle.c). */
#ifndef LYNX_LIFECYCLE_H
#define LYNX_LIFECYCLE_H

#include "config.h"

/* The configuration in force; valid once the first intercepted call has initialised Lynx. */
const struct lynx_config *lynx_config(void);

#endif /* LYNX_LIFECYCLE_H */
