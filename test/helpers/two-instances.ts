// Two tollgate instances on one PostgreSQL database (a server: PGlite is one session) selling one
// token-priced endpoint of an OpenAI-style upstream: the preamble of the tests that a payment is served and
// charged once whichever instance takes it.
import { installUptoContracts } from '../../src/chain/upto-settle.ts'
import { chainClients, fundedAccount } from './accounts.ts'
import { freshDatabaseUrl } from './database.ts'
import { type OpenAiUpstream, startOpenAiUpstream } from './openai-upstream.ts'
import { registerMerchant, startTestService, type TestService } from './service.ts'

export interface TokenPricedPair {
  a: TestService
  b: TestService
  upstream: OpenAiUpstream
  /** The endpoint's metered URL on one instance. */
  url(s: TestService): string
  stop(): Promise<void>
}

export async function startTokenPricedPair(options: {
  upstream: Parameters<typeof startOpenAiUpstream>[0]
  /** Installs the upto contracts for the shared treasury, and keeps settlement to what a test runs. */
  upto?: boolean
}): Promise<TokenPricedPair> {
  const databaseUrl = await freshDatabaseUrl()
  const treasury = await fundedAccount(0n)
  if (options.upto) await installUptoContracts(chainClients().rpcUrl, treasury.address)
  const overrides = options.upto ? { settlement: { interval_ms: 3_600_000 } } : {}
  const a = await startTestService({ databaseUrl, treasury, overrides })
  const b = await startTestService({ databaseUrl, treasury, overrides })
  const upstream = await startOpenAiUpstream(options.upstream)
  const merchant = await registerMerchant(a)
  const ep = await a.api('/api/v1/endpoints', {
    key: merchant.key,
    body: {
      upstream_url: `${upstream.url}/v1/chat/completions`,
      pricing: {
        model: 'usage',
        unit: 'tokens',
        max_price: 0.05,
        input_price_per_million: 2,
        cached_input_price_per_million: 1,
        output_price_per_million: 10,
      },
    },
  })
  return {
    a,
    b,
    upstream,
    url: (s) => `${s.url}/m/${ep.body.id}`,
    async stop() {
      await a.stop()
      await b.stop()
      await upstream.close()
    },
  }
}
