// Webhook dispatcher (issue 5): placeholder until webhooks land.
import type { BackgroundModule, JobDeps } from './runner.ts'

export function createWebhookJobs(_deps: JobDeps): BackgroundModule {
  return { jobs: [] }
}
