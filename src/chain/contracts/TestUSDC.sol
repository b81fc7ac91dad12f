// SPDX-License-Identifier: MIT
// tollgate's test USDC for the local dev chain: the ERC-20, EIP-2612 and EIP-3009 surface of Circle's
// FiatTokenV2_2 (same EIP-712 domain shape, type hashes and revert reasons), with a deployer-only mint, and
// its blacklist: a blacklisted account can neither send nor receive (the flag is the balance slot's high bit,
// as FiatTokenV2_2 keeps it, so a transfer reads no other slot). Not for any real network: no pause, no
// upgradeability.
pragma solidity ^0.8.24;

interface IERC1271 {
  function isValidSignature(bytes32 hash, bytes memory signature) external view returns (bytes4);
}

contract TestUSDC {
  string public constant name = 'USD Coin';
  string public constant symbol = 'USDC';
  string public constant version = '2';
  uint8 public constant decimals = 6;

  bytes32 private constant EIP712_DOMAIN_TYPEHASH =
    keccak256('EIP712Domain(string name,string version,uint256 chainId,address verifyingContract)');
  bytes32 public constant PERMIT_TYPEHASH =
    keccak256('Permit(address owner,address spender,uint256 value,uint256 nonce,uint256 deadline)');
  bytes32 public constant TRANSFER_WITH_AUTHORIZATION_TYPEHASH =
    keccak256(
      'TransferWithAuthorization(address from,address to,uint256 value,uint256 validAfter,uint256 validBefore,bytes32 nonce)'
    );
  bytes32 public constant RECEIVE_WITH_AUTHORIZATION_TYPEHASH =
    keccak256(
      'ReceiveWithAuthorization(address from,address to,uint256 value,uint256 validAfter,uint256 validBefore,bytes32 nonce)'
    );
  bytes32 public constant CANCEL_AUTHORIZATION_TYPEHASH =
    keccak256('CancelAuthorization(address authorizer,bytes32 nonce)');

  // Upper bound of a canonical ECDSA s value (EIP-2): the other half would let a signature be replayed
  // in its malleated form under a different byte string.
  uint256 private constant SECP256K1_HALF_N = 0x7FFFFFFFFFFFFFFFFFFFFFFFFFFFFFFF5D576E7357A4501DDFE92F46681B20A0;

  /// The balance and, in its high bit, whether the account is blacklisted (slot 1, as balanceOf was).
  uint256 private constant BLACKLISTED = 1 << 255;

  address public immutable owner;
  uint256 public totalSupply;
  mapping(address => uint256) private _balanceAndBlacklistStates;
  mapping(address => mapping(address => uint256)) public allowance;
  mapping(address => uint256) public nonces;
  mapping(address => mapping(bytes32 => bool)) private _authorizationStates;

  event Transfer(address indexed from, address indexed to, uint256 value);
  event Approval(address indexed owner, address indexed spender, uint256 value);
  event AuthorizationUsed(address indexed authorizer, bytes32 indexed nonce);
  event AuthorizationCanceled(address indexed authorizer, bytes32 indexed nonce);
  event Mint(address indexed minter, address indexed to, uint256 amount);
  event Blacklisted(address indexed account);
  event UnBlacklisted(address indexed account);

  constructor() {
    owner = msg.sender;
  }

  function balanceOf(address account) external view returns (uint256) {
    return _balanceAndBlacklistStates[account] & ~BLACKLISTED;
  }

  function isBlacklisted(address account) external view returns (bool) {
    return _balanceAndBlacklistStates[account] & BLACKLISTED != 0;
  }

  /// The deployer stands for Circle's blacklister.
  function blacklist(address account) external {
    require(msg.sender == owner, 'Blacklistable: caller is not the blacklister');
    _balanceAndBlacklistStates[account] |= BLACKLISTED;
    emit Blacklisted(account);
  }

  function unBlacklist(address account) external {
    require(msg.sender == owner, 'Blacklistable: caller is not the blacklister');
    _balanceAndBlacklistStates[account] &= ~BLACKLISTED;
    emit UnBlacklisted(account);
  }

  // Computed per call, as FiatTokenV2_2 does, so a chain-id change (fork) cannot replay old signatures.
  function DOMAIN_SEPARATOR() public view returns (bytes32) {
    return
      keccak256(
        abi.encode(EIP712_DOMAIN_TYPEHASH, keccak256(bytes(name)), keccak256(bytes(version)), block.chainid, address(this))
      );
  }

  function mint(address to, uint256 amount) external returns (bool) {
    require(msg.sender == owner, 'FiatToken: caller is not a minter');
    require(to != address(0), 'FiatToken: mint to the zero address');
    totalSupply += amount;
    require(_balanceAndBlacklistStates[to] & BLACKLISTED == 0, 'Blacklistable: account is blacklisted');
    _balanceAndBlacklistStates[to] += amount;
    emit Mint(msg.sender, to, amount);
    emit Transfer(address(0), to, amount);
    return true;
  }

  function transfer(address to, uint256 value) external returns (bool) {
    _transfer(msg.sender, to, value);
    return true;
  }

  function approve(address spender, uint256 value) external returns (bool) {
    _approve(msg.sender, spender, value);
    return true;
  }

  function transferFrom(address from, address to, uint256 value) external returns (bool) {
    uint256 allowed = allowance[from][msg.sender];
    require(value <= allowed, 'ERC20: transfer amount exceeds allowance');
    if (allowed != type(uint256).max) allowance[from][msg.sender] = allowed - value;
    _transfer(from, to, value);
    return true;
  }

  // EIP-2612
  function permit(address owner_, address spender, uint256 value, uint256 deadline, uint8 v, bytes32 r, bytes32 s)
    external
  {
    permit(owner_, spender, value, deadline, abi.encodePacked(r, s, v));
  }

  function permit(address owner_, address spender, uint256 value, uint256 deadline, bytes memory signature) public {
    require(deadline == type(uint256).max || deadline >= block.timestamp, 'FiatTokenV2: permit is expired');
    bytes32 structHash = keccak256(abi.encode(PERMIT_TYPEHASH, owner_, spender, value, nonces[owner_]++, deadline));
    require(_isValidSignature(owner_, _typedDataHash(structHash), signature), 'EIP2612: invalid signature');
    _approve(owner_, spender, value);
  }

  // EIP-3009
  function authorizationState(address authorizer, bytes32 nonce) external view returns (bool) {
    return _authorizationStates[authorizer][nonce];
  }

  function transferWithAuthorization(
    address from,
    address to,
    uint256 value,
    uint256 validAfter,
    uint256 validBefore,
    bytes32 nonce,
    uint8 v,
    bytes32 r,
    bytes32 s
  ) external {
    transferWithAuthorization(from, to, value, validAfter, validBefore, nonce, abi.encodePacked(r, s, v));
  }

  function transferWithAuthorization(
    address from,
    address to,
    uint256 value,
    uint256 validAfter,
    uint256 validBefore,
    bytes32 nonce,
    bytes memory signature
  ) public {
    _useAuthorization(TRANSFER_WITH_AUTHORIZATION_TYPEHASH, from, to, value, validAfter, validBefore, nonce, signature);
    _transfer(from, to, value);
  }

  function receiveWithAuthorization(
    address from,
    address to,
    uint256 value,
    uint256 validAfter,
    uint256 validBefore,
    bytes32 nonce,
    uint8 v,
    bytes32 r,
    bytes32 s
  ) external {
    receiveWithAuthorization(from, to, value, validAfter, validBefore, nonce, abi.encodePacked(r, s, v));
  }

  function receiveWithAuthorization(
    address from,
    address to,
    uint256 value,
    uint256 validAfter,
    uint256 validBefore,
    bytes32 nonce,
    bytes memory signature
  ) public {
    // Only the payee may submit it, so a front-runner cannot move the funds without calling the payee's code.
    require(to == msg.sender, 'FiatTokenV2: caller must be the payee');
    _useAuthorization(RECEIVE_WITH_AUTHORIZATION_TYPEHASH, from, to, value, validAfter, validBefore, nonce, signature);
    _transfer(from, to, value);
  }

  function cancelAuthorization(address authorizer, bytes32 nonce, uint8 v, bytes32 r, bytes32 s) external {
    cancelAuthorization(authorizer, nonce, abi.encodePacked(r, s, v));
  }

  function cancelAuthorization(address authorizer, bytes32 nonce, bytes memory signature) public {
    require(!_authorizationStates[authorizer][nonce], 'FiatTokenV2: authorization is used or canceled');
    bytes32 structHash = keccak256(abi.encode(CANCEL_AUTHORIZATION_TYPEHASH, authorizer, nonce));
    require(_isValidSignature(authorizer, _typedDataHash(structHash), signature), 'FiatTokenV2: invalid signature');
    _authorizationStates[authorizer][nonce] = true;
    emit AuthorizationCanceled(authorizer, nonce);
  }

  function _useAuthorization(
    bytes32 typehash,
    address from,
    address to,
    uint256 value,
    uint256 validAfter,
    uint256 validBefore,
    bytes32 nonce,
    bytes memory signature
  ) private {
    require(block.timestamp > validAfter, 'FiatTokenV2: authorization is not yet valid');
    require(block.timestamp < validBefore, 'FiatTokenV2: authorization is expired');
    require(!_authorizationStates[from][nonce], 'FiatTokenV2: authorization is used or canceled');
    bytes32 structHash = keccak256(abi.encode(typehash, from, to, value, validAfter, validBefore, nonce));
    require(_isValidSignature(from, _typedDataHash(structHash), signature), 'FiatTokenV2: invalid signature');
    _authorizationStates[from][nonce] = true;
    emit AuthorizationUsed(from, nonce);
  }

  function _typedDataHash(bytes32 structHash) private view returns (bytes32) {
    return keccak256(abi.encodePacked('\x19\x01', DOMAIN_SEPARATOR(), structHash));
  }

  // An EOA signs with ECDSA; a contract wallet answers through EIP-1271 (as SignatureChecker does in v2.2).
  function _isValidSignature(address signer, bytes32 digest, bytes memory signature) private view returns (bool) {
    if (signer.code.length > 0) {
      (bool ok, bytes memory result) = signer.staticcall(
        abi.encodeWithSelector(IERC1271.isValidSignature.selector, digest, signature)
      );
      return ok && result.length >= 32 && abi.decode(result, (bytes4)) == IERC1271.isValidSignature.selector;
    }
    if (signature.length != 65) return false;
    bytes32 r;
    bytes32 s;
    uint8 v;
    assembly {
      r := mload(add(signature, 0x20))
      s := mload(add(signature, 0x40))
      v := byte(0, mload(add(signature, 0x60)))
    }
    if (uint256(s) > SECP256K1_HALF_N) return false;
    if (v != 27 && v != 28) return false;
    address recovered = ecrecover(digest, v, r, s);
    return recovered != address(0) && recovered == signer;
  }

  function _transfer(address from, address to, uint256 value) private {
    require(from != address(0), 'ERC20: transfer from the zero address');
    require(to != address(0), 'ERC20: transfer to the zero address');
    uint256 fromState = _balanceAndBlacklistStates[from];
    uint256 toState = _balanceAndBlacklistStates[to];
    require((fromState | toState) & BLACKLISTED == 0, 'Blacklistable: account is blacklisted');
    require(value <= fromState, 'ERC20: transfer amount exceeds balance');
    unchecked {
      _balanceAndBlacklistStates[from] = fromState - value;
    }
    _balanceAndBlacklistStates[to] += value;
    emit Transfer(from, to, value);
  }

  function _approve(address owner_, address spender, uint256 value) private {
    require(owner_ != address(0), 'ERC20: approve from the zero address');
    require(spender != address(0), 'ERC20: approve to the zero address');
    allowance[owner_][spender] = value;
    emit Approval(owner_, spender, value);
  }
}
