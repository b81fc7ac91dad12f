// Payment expiry sweeper (issue 4): placeholder until payments land.
import type { BackgroundModule, JobDeps } from './runner.ts'

export function createPaymentJobs(_deps: JobDeps): BackgroundModule {
  return { jobs: [] }
}
