// /payments (issue 4): placeholder until the payments routes land.
import type { Route } from '../route.ts'

export const paymentRoutes: Route[] = []
