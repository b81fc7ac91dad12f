// One $0.01 endpoint in front of an echoing upstream, and a payer with USDC to pay it by transfer: what the
// tests of hostile input at the public port (framing, smuggling) aim their raw requests at.
import { type Funded, fundedAccount } from './accounts.ts'
import { registerMerchant, startTestService, type TestService, type TestServiceOptions } from './service.ts'
import { startUpstream, type Upstream } from './upstream.ts'

export interface PaidEcho {
  svc: TestService
  upstream: Upstream
  /** The metered path (/m/<id>): the upstream sees what follows it under /echo. */
  endpointPath: string
  payer: Funded
  stop(): Promise<void>
}

export async function startPaidEcho(options: TestServiceOptions = {}): Promise<PaidEcho> {
  const svc = await startTestService(options)
  const upstream = await startUpstream()
  const merchant = await registerMerchant(svc)
  const r = await svc.api('/api/v1/endpoints', {
    key: merchant.key,
    body: { upstream_url: `${upstream.url}/echo`, price: 0.01 },
  })
  if (r.status !== 201) throw new Error(`endpoint: ${r.status} ${r.text}`)
  return {
    svc,
    upstream,
    endpointPath: `/m/${r.body.id}`,
    payer: await fundedAccount(10_000_000n),
    async stop() {
      await svc.stop()
      await upstream.close()
    },
  }
}
