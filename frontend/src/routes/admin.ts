/** The pages that configure what answers: agents, orchestrators, applications, skills, models, memory. */

import type { RouteRecordRaw } from 'vue-router'

export const adminRoutes: RouteRecordRaw[] = []
