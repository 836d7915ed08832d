/** The pages that measure retrieval: retrieval testing on a knowledge base, and evaluation runs. */

import type { RouteRecordRaw } from 'vue-router'

export const evaluationRoutes: RouteRecordRaw[] = []
