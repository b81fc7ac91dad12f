// The documented local setup for x402 clients (docs/x402.md): TOLLGATE_CONFIG=config/local-x402.json makes
// the dev chain stand in for Base Sepolia (chain 84532, USDC at its canonical address), and both published
// clients pay it with their default settings: `x402` (v1) and `@x402/fetch` with `@x402/evm` (v2).
import { join } from 'node:path'
import { x402Client } from '@x402/core/client'
import { decodePaymentResponseHeader } from '@x402/core/http'
import { registerExactEvmScheme } from '@x402/evm/exact/client'
import { wrapFetchWithPayment } from '@x402/fetch'
import { type Chain, createWalletClient, http, publicActions } from 'viem'
import { privateKeyToAccount } from 'viem/accounts'
import { baseSepolia } from 'viem/chains'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { createPaymentHeader, selectPaymentRequirements } from 'x402/client'
import { PaymentRequirementsSchema } from 'x402/types'
import { loadConfig } from '../../src/config/load.ts'
import { createLogger } from '../../src/observability/logger.ts'
import { type Service, startService } from '../../src/service.ts'
import { callApi } from '../helpers/service.ts'
import { startUpstream } from '../helpers/upstream.ts'

let svc: Service
let upstream: Awaited<ReturnType<typeof startUpstream>>
let meteredUrl: string

beforeAll(async () => {
  upstream = await startUpstream()
  const config = loadConfig({
    env: { NODE_ENV: 'test', TOLLGATE_CONFIG: join(import.meta.dirname, '../../config/local-x402.json') },
    // The file's own state file and data directory are for `npm start`; a test keeps nothing.
    overrides: { database: { data_dir: 'memory://' }, local_chain: { state_file: null } } as never,
  })
  svc = await startService(config, { logger: createLogger('warn') })
  const reg = await callApi(svc.url, '/api/v1/register', {
    body: { wallet_address: svc.chain.devChain!.payers[4]!.address, business_name: 'Local x402 Co' },
  })
  const ep = await callApi(svc.url, '/api/v1/endpoints', {
    key: reg.body.api_key,
    body: { upstream_url: `${upstream.url}/echo`, price: 0.01 },
  })
  meteredUrl = ep.body.metered_url
})
afterAll(async () => {
  await svc?.stop()
  await upstream?.close()
})

describe('config/local-x402.json: the dev chain as Base Sepolia', () => {
  it('announces chain 84532, base-sepolia and the canonical USDC', async () => {
    expect(svc.chain.chainId).toBe(84532)
    expect(svc.chain.usdc.address).toBe('0x036CbD53842c5426634e7929541eC2318f3dCF7e')
    const body = (await (await fetch(meteredUrl)).json()) as { accepts: Array<{ network: string }> }
    expect(body.accepts[0]!.network).toBe('base-sepolia')
  })

  it('the published v2 client pays with its defaults, settled before the answer', async () => {
    const client = new x402Client()
    registerExactEvmScheme(client, { signer: privateKeyToAccount(svc.chain.devChain!.payers[0]!.privateKey) })
    const r = await wrapFetchWithPayment(fetch, client)(meteredUrl)
    expect(r.status, await r.clone().text()).toBe(200)
    // The defaults of a fresh `npm start` on the dev chain: settled before the answer from a settler slot
    // derived from the dev treasury and topped up by the dev chain itself.
    const receipt = decodePaymentResponseHeader(r.headers.get('payment-response')!)
    expect(receipt).toMatchObject({ network: 'eip155:84532', success: true })
    expect(receipt.errorReason).toBeUndefined()
    expect(receipt.transaction).toMatch(/^0x[0-9a-f]{64}$/)
  })

  it('the published v1 client pays with its defaults', async () => {
    const wallet = createWalletClient({
      account: privateKeyToAccount(svc.chain.devChain!.payers[1]!.privateKey),
      chain: baseSepolia as Chain,
      transport: http(svc.chain.rpcUrl),
    }).extend(publicActions)
    // What the v1 client's fetch wrapper does: read `accepts`, pick base-sepolia exact, sign, retry.
    const body = (await (await fetch(meteredUrl)).json()) as { accepts: unknown[] }
    const requirements = selectPaymentRequirements(
      body.accepts.map((a) => PaymentRequirementsSchema.parse(a)),
      'base-sepolia',
      'exact',
    )
    const header = await createPaymentHeader(wallet, 1, requirements)
    const r = await fetch(meteredUrl, { headers: { 'X-PAYMENT': header } })
    expect(r.status, await r.clone().text()).toBe(200)
    const receipt = JSON.parse(Buffer.from(r.headers.get('x-payment-response')!, 'base64').toString())
    expect(receipt).toMatchObject({ success: true, network: 'base-sepolia' })
    expect(receipt.transaction).toMatch(/^0x[0-9a-f]{64}$/)
  })
})
