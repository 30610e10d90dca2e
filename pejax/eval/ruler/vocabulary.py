"""The built-in word list: common English nouns, adjectives and verbs, lower-case.

RULER draws its words from the ``wonderwords`` package (its noun, adjective and verb lists) and,
for very long common-words lists, from a downloaded English word list. pejax needs no download:
this module is the whole vocabulary, fixed, so an example is the same on every machine.

The words are alphabetic, distinct, and **substring-free**: no word occurs inside another (no
"arrow" beside "sparrow"), so the case-insensitive substring scorer of RULER cannot credit an
answer word for a longer word that contains it. The needle keys and word values of the NIAH tasks
are ``"{adjective}-{noun}"`` pairs, as in RULER (about 93,000 of them).

References:
  Hsieh et al. 2024, "RULER: What's the Real Context Size of Your Long-Context Language
  Models?": https://arxiv.org/abs/2404.06654
"""

NOUNS: tuple[str, ...] = (
    "abacus", "acorn", "alcove", "almanac", "almond", "amulet", "anchor", "ankle", "antler",
    "apple", "apron", "aqueduct", "armadillo", "armchair", "asteroid", "attic", "autumn",
    "avocado", "backpack", "badger", "bagel", "bakery", "balcony", "ballad", "ballet", "bamboo",
    "banana", "bandit", "banjo", "barley", "barn", "barrel", "basket", "beach", "beacon",
    "beaver", "beetle", "biscuit", "blanket", "blizzard", "blossom", "blueberry", "bobcat",
    "bonnet", "bookcase", "boomerang", "bottle", "boulder", "bracelet", "bramble", "branch",
    "bread", "breeze", "bridge", "brooch", "bucket", "buckle", "buffalo", "bugle", "buttercup",
    "cabbage", "cabin", "caboose", "cactus", "calendar", "camel", "camera", "canal", "candle",
    "canoe", "canopy", "canyon", "caramel", "cardigan", "carpet", "carrot", "castle", "cathedral",
    "cattle", "cauldron", "cellar", "cereal", "chalk", "chameleon", "chandelier", "channel",
    "chariot", "cheese", "cheetah", "cherry", "chestnut", "chimney", "chisel", "cinnamon",
    "circus", "citadel", "clarinet", "cliff", "clock", "cloud", "clover", "cobbler", "cobweb",
    "cocoa", "coconut", "coffee", "collar", "comet", "compass", "copper", "corridor", "cottage",
    "cotton", "coyote", "cradle", "crayon", "crescent", "cricket", "crocodile", "croissant",
    "crystal", "cupboard", "cupcake", "curtain", "cushion", "cymbal", "dagger", "daisy",
    "dandelion", "desert", "diamond", "dinosaur", "dolphin", "donkey", "dormouse", "dragon",
    "drawer", "drum", "dumpling", "dungeon", "eagle", "eggplant", "elbow", "elephant", "emerald",
    "engine", "envelope", "falafel", "falcon", "feather", "fence", "ferry", "fiddle", "firefly",
    "fjord", "flamingo", "flute", "forest", "fossil", "fountain", "freckle", "frog", "galaxy",
    "garden", "garlic", "garnet", "gazebo", "geyser", "ginger", "giraffe", "glacier", "glider",
    "glove", "goblet", "gondola", "gorilla", "granite", "gravel", "griffin", "guitar", "hammer",
    "hammock", "hamster", "harbor", "harpoon", "harvest", "hazel", "hedgehog", "helmet", "hermit",
    "honey", "horizon", "hornet", "hurricane", "hyacinth", "iceberg", "igloo", "iguana",
    "inkwell", "island", "ivory", "jacket", "jaguar", "jasmine", "javelin", "jelly", "jungle",
    "juniper", "kayak", "kettle", "kingdom", "kitten", "kiwi", "koala", "ladder", "lagoon",
    "lantern", "lavender", "lemon", "lemur", "lettuce", "library", "lighthouse", "limestone",
    "lizard", "llama", "lobster", "locket", "lynx", "macaroni", "magnet", "magpie", "mammoth",
    "mandolin", "mango", "maple", "marble", "marigold", "marmalade", "meadow", "melon", "mermaid",
    "meteor", "microscope", "minnow", "mirror", "mitten", "mongoose", "monkey", "moose", "mosaic",
    "mountain", "muffin", "mulberry", "mushroom", "napkin", "narwhal", "nebula", "nectar",
    "needle", "nightingale", "nomad", "notebook", "nugget", "nutmeg", "oasis", "oatmeal",
    "obelisk", "ocean", "octopus", "olive", "omelet", "onion", "opal", "orbit", "orchard",
    "orchid", "origami", "ostrich", "otter", "oyster", "paddle", "paddock", "palace", "pancake",
    "panther", "papaya", "paprika", "parrot", "parsley", "parsnip", "peach", "peacock", "peanut",
    "pebble", "pelican", "pencil", "pendulum", "penguin", "pepper", "periscope", "pheasant",
    "piano", "pickle", "pigeon", "pillow", "pilot", "pinecone", "pirate", "planet", "platypus",
    "pocket", "poncho", "porcupine", "potato", "prairie", "pretzel", "puddle", "pumpkin",
    "puppet", "puzzle", "pyramid", "quartz", "quilt", "quiver", "quokka", "rabbit", "raccoon",
    "radish", "raven", "reef", "reindeer", "rhino", "rhubarb", "ribbon", "river", "robin",
    "rocket", "rosemary", "ruby", "saddle", "saffron", "salmon", "sandal", "sapphire", "satchel",
    "saucer", "scarf", "scooter", "scorpion", "sculpture", "seagull", "seashell", "sequoia",
    "shadow", "shamrock", "shovel", "shrimp", "silver", "skeleton", "skillet", "skylark",
    "sleigh", "sloth", "snorkel", "snowflake", "sorbet", "spaghetti", "sparrow", "spatula",
    "spider", "spinach", "sponge", "squid", "squirrel", "stable", "stallion", "starfish",
    "statue", "stirrup", "stream", "sundial", "sunflower", "sunrise", "swallow", "swan",
    "sweater", "tadpole", "tambourine", "tapestry", "tartan", "teapot", "telescope", "thimble",
    "thistle", "thunder", "tiger", "timber", "toboggan", "tomato", "topaz", "tortoise", "toucan",
    "tractor", "treasure", "trellis", "trombone", "trout", "trumpet", "tuba", "tulip", "tundra",
    "tunnel", "turban", "turnip", "turtle", "typhoon", "umbrella", "unicorn", "urchin", "valley",
    "vanilla", "velvet", "village", "violin", "volcano", "vulture", "waffle", "wagon", "walkway",
    "walnut", "walrus", "warbler", "wardrobe", "waterfall", "weasel", "whisker", "whistle",
    "wigwam", "willow", "windmill", "window", "wizard", "wolf", "wombat", "woodpecker", "wren",
    "yacht", "yodel", "yogurt", "zebra", "zeppelin", "zipper", "zucchini",
)

ADJECTIVES: tuple[str, ...] = (
    "absent", "amber", "ancient", "angry", "anxious", "arctic", "awkward", "bashful", "bitter",
    "bland", "blissful", "bold", "bouncy", "brave", "breezy", "bright", "brisk", "bumpy", "busy",
    "calm", "candid", "careful", "cheerful", "chilly", "chubby", "clever", "clumsy", "cosmic",
    "cozy", "crafty", "creamy", "crisp", "crooked", "crunchy", "cuddly", "curious", "curly",
    "damp", "dapper", "dazzling", "deep", "dizzy", "drowsy", "dusty", "eager", "early", "earnest",
    "elated", "elegant", "empty", "endless", "fabulous", "faint", "famous", "fancy", "fearless",
    "feisty", "fierce", "fluffy", "foggy", "fragile", "frantic", "friendly", "frosty", "frozen",
    "fuzzy", "gentle", "giant", "gifted", "gleaming", "glossy", "golden", "graceful", "grand",
    "grateful", "gritty", "grumpy", "hairy", "handsome", "happy", "hasty", "hazy", "healthy",
    "hearty", "heavy", "hidden", "hollow", "honest", "hopeful", "humble", "hungry", "idle",
    "jolly", "jovial", "joyful", "juicy", "keen", "kind", "lanky", "large", "lazy", "leafy",
    "lively", "lonely", "lumpy", "majestic", "mellow", "merry", "mighty", "misty", "modest",
    "moody", "muddy", "musty", "narrow", "nasty", "neat", "nervous", "nimble", "noble", "noisy",
    "odd", "orange", "pale", "patient", "peaceful", "perky", "plucky", "plump", "polite", "proud",
    "puffy", "purple", "quick", "quiet", "quirky", "rapid", "rare", "ready", "rocky", "rosy",
    "rough", "royal", "sandy", "scary", "serene", "shaggy", "shiny", "short", "shy", "silent",
    "silky", "silly", "simple", "sleepy", "slender", "slim", "slippery", "smooth", "snowy",
    "soft", "solid", "sour", "spicy", "spotless", "stormy", "striped", "sturdy", "sunny",
    "superb", "swift", "tame", "tangy", "tender", "thirsty", "tidy", "timid", "tiny", "tough",
    "tranquil", "tricky", "trusty", "ugly", "unusual", "vast", "vivid", "wacky", "wary", "watery",
    "wealthy", "weary", "wicked", "wild", "windy", "wise", "witty", "wobbly", "wooden", "woolly",
    "worthy", "yellow", "young", "zany", "zealous", "zesty",
)

VERBS: tuple[str, ...] = (
    "admire", "arrive", "balance", "borrow", "bounce", "breathe", "build", "carry", "chase",
    "climb", "collect", "compose", "cook", "crawl", "dance", "decorate", "deliver", "discover",
    "dream", "drift", "explore", "fetch", "float", "gallop", "gather", "giggle", "grow", "hike",
    "hover", "hurry", "imagine", "invent", "juggle", "jump", "kneel", "knit", "laugh", "launch",
    "listen", "march", "melt", "mend", "murmur", "navigate", "observe", "paint", "polish",
    "ponder", "pour", "promise", "question", "relax", "remember", "repair", "rescue", "roam",
    "rush", "sail", "scribble", "search", "shiver", "sing", "skate", "sketch", "slide", "smile",
    "sneeze", "soar", "sparkle", "splash", "sprint", "squeeze", "stroll", "study", "swim",
    "swing", "travel", "tumble", "twirl", "unfold", "vanish", "wander", "whisper", "wiggle",
    "wink", "wonder", "worry", "yawn", "zoom",
)


def single_words() -> tuple[str, ...]:
  """Every noun, adjective and verb once, sorted.

  Returns:
    The distinct words of :data:`NOUNS`, :data:`ADJECTIVES` and :data:`VERBS`, sorted.
  """
  return tuple(sorted(set(NOUNS) | set(ADJECTIVES) | set(VERBS)))


def num_compound_words() -> int:
  """How many ``"{adjective}-{noun}"`` words :func:`compound_word` indexes.

  Returns:
    ``len(ADJECTIVES) * len(NOUNS)``.
  """
  return len(ADJECTIVES) * len(NOUNS)


def compound_word(index: int) -> str:
  """The ``index``-th ``"{adjective}-{noun}"`` word (RULER's needle keys), adjective-major.

  Args:
    index: in ``[0, num_compound_words())``.

  Returns:
    For example ``compound_word(0) == "absent-abacus"``.
  """
  adjective, noun = divmod(int(index), len(NOUNS))
  return f"{ADJECTIVES[adjective]}-{NOUNS[noun]}"
