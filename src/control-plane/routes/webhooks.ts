// /webhooks and /events (issue 5): placeholder until the webhook routes land.
import type { Route } from '../route.ts'

export const webhookRoutes: Route[] = []
