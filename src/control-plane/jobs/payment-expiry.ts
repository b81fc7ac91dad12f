// The payment expiry sweeper: pending payments past expires_at become expired (payment.expired), and any
// partial amount they held is scheduled for refund. Runs on the leader only (once per database).
import { expireDuePayments } from '../../db/payments.ts'
import type { BackgroundModule, JobDeps } from './runner.ts'

export const PAYMENT_EXPIRY_JOB = 'payment-expiry'

export function createPaymentJobs(deps: JobDeps): BackgroundModule {
  return {
    jobs: [
      {
        name: PAYMENT_EXPIRY_JOB,
        intervalMs: deps.config.jobs.expiry_interval_ms,
        run: async () => {
          const expired = await expireDuePayments(deps.sql, {
            view: {
              publicUrl: deps.publicUrl(),
              network: deps.chain.network,
              chainId: deps.chain.chainId,
              treasury: deps.chain.treasury,
              usdcAddress: deps.chain.usdc.address,
            },
          })
          if (expired > 0) deps.logger.info('payments expired', { count: expired })
          return expired
        },
      },
    ],
  }
}
