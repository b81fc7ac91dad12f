// x402 `upto` paid by a contract wallet (ERC-1271): the published client unchanged (x402Client +
// UptoEvmScheme + @x402/fetch), its signer the wallet's address with its owner's key signing, as the x402
// exact smart-wallet payers do. The permit's signature is not the key of `from`, so tollgate asks the wallet
// (isValidSignature on the Permit2 digest, an eth_call) and Permit2 asks it again when the permit is
// settled. Paid on the default endpoint (settled before the answer): the charge moves from the wallet, read
// as paid; a stranger's key signing for the wallet is refused and nothing is claimed; a wallet not deployed
// yet (an ERC-6492 wrapper) is refused as such; the node failing to answer the wallet's check is a 503 to
// retry, not a bad signature.
import { createServer, type Server } from 'node:http'
import { x402Client, x402HTTPClient } from '@x402/core/client'
import { decodePaymentResponseHeader } from '@x402/core/http'
import { UptoEvmScheme } from '@x402/evm/upto/client'
import { wrapFetchWithPayment } from '@x402/fetch'
import { type Address, getAddress, type Hex, serializeErc6492Signature } from 'viem'
import { generatePrivateKey, type PrivateKeyAccount, privateKeyToAccount } from 'viem/accounts'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { installUptoContracts } from '../../src/chain/upto-settle.ts'
import { reconcile } from '../../src/control-plane/jobs/reconcile.ts'
import { UPTO_SETTLEMENT_JOB } from '../../src/schemes/upto/settle-after.ts'
import { approvePermit2From, fundedSmartWallet } from '../chain/contracts/smart-wallet.ts'
import { chainClients, fundedAccount, usdcBalance } from '../helpers/accounts.ts'
import { type RpcProxy, startRpcProxy } from '../helpers/rpc-proxy.ts'
import { registerMerchant, startTestService, type TestService } from '../helpers/service.ts'
import { listenLocal, writeUsageStream } from '../helpers/usage-stream.ts'

const { rpcUrl, publicClient, usdc } = chainClients()
const MAX_PRICE_ATOMIC = 500_000n
const USAGE = { prompt_tokens: 1_000, completion_tokens: 2_000 }
const CHARGE = BigInt(USAGE.prompt_tokens * 3 + USAGE.completion_tokens * 15) // 33,000 base units

/** An OpenAI-compatible upstream streaming 20 chunks and the usage; it counts what it served. */
async function startLlmUpstream() {
  let served = 0
  const server: Server = createServer((req, res) => {
    served++
    req.resume()
    req.on('end', () => writeUsageStream(res, 20, USAGE))
  })
  return { ...(await listenLocal(server)), count: () => served }
}

/** The published client paying as the wallet: its address pays, `signer`'s key signs. */
function walletClient(s: TestService, wallet: Address, signer: PrivateKeyAccount): x402Client {
  const network = `eip155:${s.chain.chainId}` as const
  const account = { address: wallet, signTypedData: (m: never) => signer.signTypedData(m) }
  return x402Client.fromConfig({
    schemes: [{ network, client: new UptoEvmScheme(account as never) }],
    spendControls: { allowedAssets: [{ network, asset: s.chain.usdc.address }] },
  })
}

const REQUEST = {
  method: 'POST',
  headers: { 'content-type': 'application/json' },
  body: JSON.stringify({ model: 'm', stream: true, stream_options: { include_usage: true }, messages: [] }),
}

/** A payment header the published client signs for `url`'s 402 as the wallet, with `signer`'s key. */
async function paymentHeader(s: TestService, url: string, wallet: Address, signer: PrivateKeyAccount) {
  const client = new x402HTTPClient(walletClient(s, wallet, signer))
  const r = await fetch(url, REQUEST)
  expect(r.status).toBe(402)
  const required = client.getPaymentRequiredResponse((name) => r.headers.get(name), await r.json())
  return client.encodePaymentSignatureHeader(await client.createPaymentPayload(required))
}

let svc: TestService
let upstream: Awaited<ReturnType<typeof startLlmUpstream>>
let merchantKey: string
let url: string

async function createEndpoint(s: TestService, key: string) {
  const ep = await s.api('/api/v1/endpoints', {
    key,
    body: {
      upstream_url: `${upstream.url}/v1`,
      pricing: {
        model: 'usage',
        unit: 'tokens',
        max_price: Number(MAX_PRICE_ATOMIC) / 1e6,
        input_price_per_million: 3,
        output_price_per_million: 15,
      },
    },
  })
  expect(ep.status, ep.text).toBe(201)
  return `${ep.body.metered_url}/chat/completions`
}

beforeAll(async () => {
  const treasury = await fundedAccount(0n)
  await installUptoContracts(rpcUrl, treasury.address)
  svc = await startTestService({
    treasury,
    overrides: {
      proxy: { allow_private_upstreams: true },
      settlement: { interval_ms: 3_600_000 },
      payouts: { interval_ms: 3_600_000 },
    },
  })
  upstream = await startLlmUpstream()
  merchantKey = (await registerMerchant(svc)).key
  url = await createEndpoint(svc, merchantKey)
})
afterAll(async () => {
  await svc?.stop()
  await upstream?.close()
})

/** A TestSmartWallet owned by a fresh key, holding `amountAtomic` USDC, that approved Permit2. */
async function smartWallet(amountAtomic = 1_000_000n) {
  const funder = await fundedAccount(amountAtomic)
  const made = await fundedSmartWallet({ rpcUrl, usdc, funderKey: funder.privateKey, amountAtomic })
  const wallet = getAddress(made.wallet)
  await approvePermit2From({ rpcUrl, usdc, wallet })
  return { wallet, owner: made.owner }
}

describe('x402 upto paid by an ERC-1271 smart wallet', () => {
  it('pays through the published client; settled before the answer from the wallet, read as paid', async () => {
    const { wallet, owner } = await smartWallet()
    const before = await usdcBalance(wallet)
    const r = await wrapFetchWithPayment(fetch, walletClient(svc, wallet, owner))(url, REQUEST)
    expect(r.status, await r.clone().text()).toBe(200)
    expect(await r.text()).toContain('t19 ')
    const receipt = decodePaymentResponseHeader(r.headers.get('payment-response')!)
    expect(receipt).toMatchObject({ success: true, payer: wallet })
    expect(receipt.transaction).toMatch(/^0x[0-9a-f]{64}$/)
    // The charge, not the maximum, moved from the wallet in the transaction the receipt names.
    expect(before - (await usdcBalance(wallet))).toBe(CHARGE)
    const mined = await publicClient.getTransactionReceipt({ hash: receipt.transaction as Hex })
    expect(mined.status).toBe('success')
    // Booked once the capture is written and the settlement recorded on it (the job finds nothing to send).
    await svc.flushCaptures()
    await svc.jobs.runNow(UPTO_SETTLEMENT_JOB)
    await expect
      .poll(
        async () =>
          (
            await svc.sql<{ settled_atomic: string | null; settlement_tx: string }[]>`
              SELECT settled_atomic::text, settlement_tx FROM claims
              WHERE kind = 'upto' AND lower(payer) = ${wallet.toLowerCase()}`
          )[0],
        { timeout: 10_000, interval: 100 },
      )
      .toEqual({ settled_atomic: CHARGE.toString(), settlement_tx: receipt.transaction })
    expect(before - (await usdcBalance(wallet))).toBe(CHARGE)
    const report = await reconcile({ sql: svc.sql, chain: svc.chain, config: svc.config })
    expect(report.differences).toEqual([])
  })

  it("a stranger's key signing for the wallet is refused, and nothing is claimed", async () => {
    const { wallet } = await smartWallet()
    const stranger = privateKeyToAccount(generatePrivateKey())
    const header = await paymentHeader(svc, url, wallet, stranger)
    const before = upstream.count()
    const r = await fetch(url, { ...REQUEST, headers: { ...REQUEST.headers, ...header } })
    expect(r.status).toBe(402)
    expect(await r.json()).toMatchObject({ error: 'invalid_signature' })
    expect(upstream.count()).toBe(before)
    const claims = await svc.sql`SELECT 1 FROM claims WHERE lower(payer) = ${wallet.toLowerCase()}`
    expect(claims).toHaveLength(0)
  })
})

describe('x402 upto paid by a smart wallet not deployed yet (ERC-6492)', () => {
  it('is refused as not deployed, before any chain read of its funds, and nothing is claimed', async () => {
    const owner = privateKeyToAccount(generatePrivateKey())
    const counterfactual = privateKeyToAccount(generatePrivateKey()).address
    // What a counterfactual wallet's owner signs: its signature wrapped with the factory call that would
    // deploy it (a factory tollgate does not deploy through).
    const signer = {
      signTypedData: async (m: never) =>
        serializeErc6492Signature({
          address: privateKeyToAccount(generatePrivateKey()).address,
          data: '0xdeadbeef',
          signature: await owner.signTypedData(m),
        }),
    }
    const header = await paymentHeader(svc, url, counterfactual, signer as never)
    const before = upstream.count()
    const r = await fetch(url, { ...REQUEST, headers: { ...REQUEST.headers, ...header } })
    expect(r.status).toBe(402)
    expect(await r.json()).toMatchObject({ error: 'smart_wallet_not_deployed' })
    expect(upstream.count()).toBe(before)
    const claims = await svc.sql`SELECT 1 FROM claims WHERE lower(payer) = ${counterfactual.toLowerCase()}`
    expect(claims).toHaveLength(0)
  })
})

describe('x402 upto paid by an ERC-1271 smart wallet, the node failing', () => {
  let gate: RpcProxy
  let gated: TestService
  afterAll(async () => {
    await gated?.stop()
    await gate?.close()
  })

  it('a wallet the node cannot ask is a 503 to retry, not a bad signature; asked again, it pays', async () => {
    const { wallet, owner } = await smartWallet()
    gate = await startRpcProxy(rpcUrl)
    const treasury = await fundedAccount(0n)
    await installUptoContracts(rpcUrl, treasury.address)
    gated = await startTestService({
      treasury,
      rpcUrl: gate.url,
      overrides: { proxy: { allow_private_upstreams: true }, payouts: { interval_ms: 3_600_000 } },
    })
    const gatedUrl = await createEndpoint(gated, (await registerMerchant(gated)).key)
    const header = await paymentHeader(gated, gatedUrl, wallet, owner)
    const before = upstream.count()
    const paid = { ...REQUEST, headers: { ...REQUEST.headers, ...header } }
    // eth_call failing (the wallet's isValidSignature among them): retry later, the payment is not bad.
    gate.failMethods = ['eth_call']
    const down = await fetch(gatedUrl, paid)
    expect(down.status, await down.clone().text()).toBe(503)
    await down.arrayBuffer()
    expect(upstream.count()).toBe(before)
    gate.failMethods = []
    const up = await fetch(gatedUrl, paid)
    expect(up.status, await up.clone().text()).toBe(200)
    await up.text()
    expect(upstream.count()).toBe(before + 1)
  })
})
