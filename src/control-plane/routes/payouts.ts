// /payouts (issue 6): placeholder until the payout routes land.
import type { Route } from '../route.ts'

export const payoutRoutes: Route[] = []
