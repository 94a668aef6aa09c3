package emulator

import (
	"fmt"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"
)

// Special token ids of Qwen2.5 (tokenizer_config.json).
const (
	TokenEndOfText = 151643 // <|endoftext|>
	TokenIMStart   = 151644 // <|im_start|>
	TokenIMEnd     = 151645 // <|im_end|>, the instruct model's EOS
	// regularVocab is the number of ids the tokenizer hashes pieces into;
	// ids from here to the model's vocab size are special or unused.
	regularVocab = TokenEndOfText
)

var specials = map[int]string{TokenEndOfText: "<|endoftext|>", TokenIMStart: "<|im_start|>", TokenIMEnd: "<|im_end|>"}

// Tokenizer is the emulator's deterministic, byte-pair-free tokenizer.
//
// Text is split into pieces, left to right: a run of letters, digits and
// '_' with at most one leading space (" foo_bar1"); a run of whitespace
// other than a single space before a word ("\n    "); or any other single
// character ("(", "."). Each piece's id is FNV-1a-64(piece) mod 151643, so
// the same text always gives the same ids in every process and config,
// and ids stay below Qwen2.5's special tokens.
//
// Detokenize maps each id back to the piece this process last saw for it
// (every piece ever tokenized, and every word the emulated model can
// generate, is remembered). Limits: an id never produced by Tokenize in this
// process (a random id, or one from another process) comes back as
// "<|id:N|>"; two pieces that hash to the same id come back as the first one
// seen. Special ids come back as their names.
type Tokenizer struct {
	mu     sync.RWMutex
	pieces map[int]string
}

// NewTokenizer returns a tokenizer that knows the output vocabulary.
func NewTokenizer() *Tokenizer {
	t := &Tokenizer{pieces: make(map[int]string)}
	for _, w := range outputWords {
		t.remember(PieceID(w), w)
	}
	return t
}

// PieceID is the id of one piece: FNV-1a-64 of its UTF-8 bytes mod 151643.
func PieceID(piece string) int {
	h := uint64(14695981039346656037) // FNV-1a's offset basis, as hash/fnv
	for i := 0; i < len(piece); i++ {
		h ^= uint64(piece[i])
		h *= 1099511628211
	}
	return int(h % regularVocab)
}

func wordRune(r rune) bool { return r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) }

// Split cuts text into the tokenizer's pieces.
func Split(text string) []string {
	var out []string
	eachPiece(text, func(p string) { out = append(out, p) })
	return out
}

// eachPiece calls fn with each of text's pieces in order (Split's).
func eachPiece(text string, fn func(piece string)) {
	for i := 0; i < len(text); {
		r, n := utf8.DecodeRuneInString(text[i:])
		j := i + n
		switch {
		case r == ' ' && j < len(text):
			r2, _ := utf8.DecodeRuneInString(text[j:])
			if wordRune(r2) {
				for j < len(text) {
					r3, n3 := utf8.DecodeRuneInString(text[j:])
					if !wordRune(r3) {
						break
					}
					j += n3
				}
			} else if unicode.IsSpace(r2) {
				j = spaceRun(text, j)
			}
		case wordRune(r):
			for j < len(text) {
				r3, n3 := utf8.DecodeRuneInString(text[j:])
				if !wordRune(r3) {
					break
				}
				j += n3
			}
		case unicode.IsSpace(r):
			j = spaceRun(text, j)
		}
		fn(text[i:j])
		i = j
	}
}

// spaceRun extends a whitespace run from j, leaving a final single space
// that precedes a word for that word.
func spaceRun(text string, j int) int {
	for j < len(text) {
		r, n := utf8.DecodeRuneInString(text[j:])
		if !unicode.IsSpace(r) {
			break
		}
		if r == ' ' && j+n < len(text) {
			r2, _ := utf8.DecodeRuneInString(text[j+n:])
			if wordRune(r2) {
				break
			}
		}
		j += n
	}
	return j
}

// Tokenize returns the ids of text's pieces and remembers them for
// Detokenize.
func (t *Tokenizer) Tokenize(text string) (ids []int, pieces []string) {
	pieces = Split(text)
	ids = make([]int, len(pieces))
	t.mu.Lock()
	for i, p := range pieces {
		id := PieceID(p)
		ids[i] = id
		t.rememberLocked(id, p)
	}
	t.mu.Unlock()
	return ids, pieces
}

// maxRemembered is the longest piece Detokenize gives back; a longer one
// (a run of letters kilobytes long) comes back as "<|id:N|>". The pieces
// remembered are thus at most 151,643 of 128 bytes, whatever prompts come.
const maxRemembered = 128

// rememberLocked keeps a copy of p for id unless id has one or p is too
// long: a copy, since p is a slice of a prompt that would otherwise be kept
// whole for as long as the process lives.
func (t *Tokenizer) rememberLocked(id int, p string) {
	if len(p) > maxRemembered {
		return
	}
	if _, ok := t.pieces[id]; !ok {
		t.pieces[id] = strings.Clone(p)
	}
}

func (t *Tokenizer) remember(id int, p string) {
	t.mu.Lock()
	t.rememberLocked(id, p)
	t.mu.Unlock()
}

// tokens collects a prompt's ids as they are made: it keeps the first max
// of them and counts them all, so that a prompt of any length holds at most
// max ids (max-model-len: a prompt that long is refused anyway, and the
// refusal states the exact count).
type tokens struct {
	ids []int
	n   int // all the ids, kept or not
	max int // most ids kept; 0: all
	// vocab bounds the ids beyond the kept ones (0: unchecked): the first
	// out of [0, vocab) among them is recorded, so that the refusal names
	// the same id as if every id were kept.
	vocab  int
	bad    int
	hasBad bool
}

func newTokens(lim Limits) *tokens { return &tokens{max: max(lim.MaxModelLen, 0), vocab: lim.Vocab} }

func (k *tokens) add(id int) {
	k.n++
	if k.max == 0 || len(k.ids) < k.max {
		k.ids = append(k.ids, id)
		return
	}
	if !k.hasBad && k.vocab > 0 && (id < 0 || id >= k.vocab) {
		k.bad, k.hasBad = id, true
	}
}

// into sets req's prompt from k: the kept ids, and the counts apply judges.
func (k *tokens) into(req *CompletionRequest) {
	req.Prompt, req.promptLen = k.ids, k.n
	req.badID, req.hasBadID = k.bad, k.hasBad
}

// tokenizeInto adds text's ids to k, as Tokenize makes them, without a
// slice of its pieces. Pieces are split and hashed outside the lock and
// remembered a batch at a time, so that requests tokenizing at once do not
// take turns; those of a prompt past k's max, refused anyway, are not
// remembered.
func (t *Tokenizer) tokenizeInto(text string, k *tokens) {
	type piece struct {
		id int
		p  string
	}
	var batch [256]piece
	n := 0
	flush := func() {
		t.mu.Lock()
		for _, b := range batch[:n] {
			t.rememberLocked(b.id, b.p)
		}
		t.mu.Unlock()
		n = 0
	}
	eachPiece(text, func(p string) {
		id := PieceID(p)
		k.add(id)
		if k.max > 0 && k.n > k.max {
			return
		}
		batch[n] = piece{id, p}
		if n++; n == len(batch) {
			flush()
		}
	})
	if n > 0 {
		flush()
	}
}

// Piece is the text of one id (see Tokenizer for the limits).
func (t *Tokenizer) Piece(id int) string {
	if s, ok := specials[id]; ok {
		return s
	}
	t.mu.RLock()
	s, ok := t.pieces[id]
	t.mu.RUnlock()
	if ok {
		return s
	}
	return fmt.Sprintf("<|id:%d|>", id)
}

// Detokenize joins the pieces of ids.
func (t *Tokenizer) Detokenize(ids []int) string {
	var b strings.Builder
	for _, id := range ids {
		b.WriteString(t.Piece(id))
	}
	return b.String()
}

// outputWords is the emulated model's output vocabulary: code-like pieces,
// each a single piece of the tokenizer, so generated text detokenizes
// exactly.
var outputWords = []string{
	" return", " if", " else", " for", " in", " def", " self", " x", " y", " i", " n", " value",
	" result", " None", " True", " False", " and", " or", " not", " len", " list", " dict",
	" data", " key", " item", " range", " print", " import", " from", " class", " with", " as",
	"(", ")", ":", ",", ".", "=", "+", "-", "*", "[", "]", "\n", "\n    ", "\n        ",
	" 0", " 1", " 2", " err", " nil", " func", " ctx", " error", " string", " int", " go", "{", "}",
	" TODO",
}

// outputToken is the emulated model's deterministic greedy choice: the
// token at output position pos for a prompt whose hash is promptHash. It
// depends on nothing else, so temperature-0 outputs agree across configs,
// batch sizes, roles and preemptions.
func outputToken(promptHash uint64, pos int) int {
	h := mix(promptHash ^ (uint64(pos)+1)*0x9e3779b97f4a7c15)
	return outputIDs[h%uint64(len(outputIDs))]
}

// naturalLength is where the emulated model emits EOS when ignore_eos is
// off: 256 + promptHash mod 1024 output tokens.
func naturalLength(promptHash uint64) int { return 256 + int(mix(promptHash^0xe05)%1024) }

var outputIDs = func() []int {
	ids := make([]int, len(outputWords))
	for i, w := range outputWords {
		ids[i] = PieceID(w)
	}
	return ids
}()

// mix is splitmix64's finaliser.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// hashTokens is FNV-1a over the ids, chained from seed; it names prompts
// and KV blocks.
func hashTokens(seed uint64, ids []int) uint64 {
	return mix(fnvTokens(seed^0xcbf29ce484222325, ids))
}

// fnvTokens continues FNV-1a state h over ids (each as 4 little-endian
// bytes): hashTokens(seed, a++b) = mix(fnvTokens(fnvTokens(seed^offset, a), b)).
func fnvTokens(h uint64, ids []int) uint64 {
	for _, id := range ids {
		v := uint64(id)
		for k := 0; k < 4; k++ {
			h ^= v & 0xff
			h *= 0x100000001b3
			v >>= 8
		}
	}
	return h
}
