// The networks tollgate runs on: chain ids, canonical USDC, explorers and the names x402 uses for them.
import type { Address } from 'viem'
import type { Network } from '../config/schema.ts'

export interface NetworkInfo {
  network: Network
  /** null on `local`: the dev chain decides (anvil's default is 31337), read from the RPC at start. */
  chainId: number | null
  /** Circle's USDC; null on `local`, where the project deploys its own TestUSDC. */
  usdcAddress: Address | null
  explorerUrl: string | null
  /** x402 v1 `network` field. x402 has no name for a private dev chain, so local uses 'local'. */
  x402Network: string
}

export const networks: Readonly<Record<Network, NetworkInfo>> = {
  local: { network: 'local', chainId: null, usdcAddress: null, explorerUrl: null, x402Network: 'local' },
  base: {
    network: 'base',
    chainId: 8453,
    usdcAddress: '0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913',
    explorerUrl: 'https://basescan.org',
    x402Network: 'base',
  },
  'base-sepolia': {
    network: 'base-sepolia',
    chainId: 84532,
    usdcAddress: '0x036CbD53842c5426634e7929541eC2318f3dCF7e',
    explorerUrl: 'https://sepolia.basescan.org',
    x402Network: 'base-sepolia',
  },
}

/** CAIP-2 chain id, the `network` of x402 v2 requirements. */
export function caip2(chainId: number): `eip155:${number}` {
  return `eip155:${chainId}`
}

export function explorerTxUrl(explorerUrl: string | null, hash: string): string | null {
  return explorerUrl ? `${explorerUrl}/tx/${hash}` : null
}
