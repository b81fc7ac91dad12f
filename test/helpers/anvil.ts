// A private dev chain for a test file (5 payers, 1000 USDC each) and the anvil controls tests need:
// "broadcast now, mine later" (automine off, evm_mine) and moving the clock. Stop it in afterAll.
import type { Hex } from 'viem'
import { privateKeyToAccount } from 'viem/accounts'
import {
  type ChainPublicClient,
  type ChainWalletClient,
  chainDefinition,
  createChainPublicClient,
  createChainWalletClient,
} from '../../src/chain/client.ts'
import { type DevChain, type DevChainOptions, startDevChain } from '../../src/chain/dev-chain.ts'

export const TEST_PAYER_FUNDING = 1_000_000_000n // 1000 USDC

export function startTestChain(options: Partial<DevChainOptions> = {}): Promise<DevChain> {
  return startDevChain({ payers: 5, payerFunding: TEST_PAYER_FUNDING, ...options })
}

/** The chain tests' client options: fail fast (2 s, no retry), poll every 50 ms. */
export const clientOptions = (rpcUrl: string) => ({
  rpcUrl,
  timeoutMs: 2000,
  retryCount: 0,
  pollingIntervalMs: 50,
})

/** tollgate's own public client for `dev`, talking through `rpcUrl` (the chain's, or a proxy in front of it). */
export function localPublicClient(dev: DevChain, rpcUrl = dev.rpcUrl): ChainPublicClient {
  return createChainPublicClient(chainDefinition('local', dev.chainId, rpcUrl), clientOptions(rpcUrl))
}

/** tollgate's own wallet client for one of `dev`'s keys. */
export function localWalletClient(dev: DevChain, key: Hex): ChainWalletClient {
  const chain = chainDefinition('local', dev.chainId, dev.rpcUrl)
  return createChainWalletClient(chain, privateKeyToAccount(key), clientOptions(dev.rpcUrl))
}

export async function rpc<T = unknown>(rpcUrl: string, method: string, params: unknown[] = []): Promise<T> {
  const res = await fetch(rpcUrl, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ jsonrpc: '2.0', id: 1, method, params }),
  })
  const body = (await res.json()) as { result?: T; error?: { message: string } }
  if (body.error) throw new Error(`${method}: ${body.error.message}`)
  return body.result as T
}

/** Off: transactions wait in the mempool until mine() (or the block time, if any). */
export async function setAutomine(rpcUrl: string, enabled: boolean): Promise<void> {
  await rpc(rpcUrl, 'evm_setAutomine', [enabled])
}

export async function mine(rpcUrl: string, blocks = 1): Promise<void> {
  for (let i = 0; i < blocks; i++) await rpc(rpcUrl, 'evm_mine')
}

/** Moves the chain's clock: the next mined block is `seconds` later. */
export async function increaseTime(rpcUrl: string, seconds: number): Promise<void> {
  await rpc(rpcUrl, 'evm_increaseTime', [seconds])
}
