// The slice of USDC's ABI the service uses (FiatTokenV2 names and overloads), and token metadata reads.
import { type Address, type Client, parseAbi } from 'viem'
import { readContract } from 'viem/actions'

export const transferEvent = parseAbi([
  'event Transfer(address indexed from, address indexed to, uint256 value)',
])[0]

export const usdcAbi = parseAbi([
  'event Transfer(address indexed from, address indexed to, uint256 value)',
  'event AuthorizationUsed(address indexed authorizer, bytes32 indexed nonce)',
  'function balanceOf(address account) view returns (uint256)',
  'function decimals() view returns (uint8)',
  'function name() view returns (string)',
  'function version() view returns (string)',
  'function transfer(address to, uint256 value) returns (bool)',
  'function approve(address spender, uint256 value) returns (bool)',
  'function allowance(address owner, address spender) view returns (uint256)',
  'function authorizationState(address authorizer, bytes32 nonce) view returns (bool)',
  // Both overloads exist on FiatTokenV2_2 (Base USDC): v,r,s for EOAs; bytes also takes EIP-1271 signatures.
  'function transferWithAuthorization(address from, address to, uint256 value, uint256 validAfter, uint256 validBefore, bytes32 nonce, uint8 v, bytes32 r, bytes32 s)',
  'function transferWithAuthorization(address from, address to, uint256 value, uint256 validAfter, uint256 validBefore, bytes32 nonce, bytes signature)',
])

export interface TokenInfo {
  decimals: number
  name: string
  version: string
}

/** Reads what x402 clients need for the EIP-712 domain; the three calls share one batched RPC request. */
export async function readTokenInfo(client: Client, { address }: { address: Address }): Promise<TokenInfo> {
  const [decimals, name, version] = await Promise.all([
    readContract(client, { address, abi: usdcAbi, functionName: 'decimals' }),
    readContract(client, { address, abi: usdcAbi, functionName: 'name' }),
    readContract(client, { address, abi: usdcAbi, functionName: 'version' }),
  ])
  return { decimals, name, version }
}
