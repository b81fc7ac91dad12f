// Payout batcher (issue 6): placeholder until payouts land.
import type { BackgroundModule, JobDeps } from './runner.ts'

export function createPayoutJobs(_deps: JobDeps): BackgroundModule {
  return { jobs: [] }
}
