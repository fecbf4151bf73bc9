"""Simple questions and their one- or two-sentence answers, for the demo model's plain chats.

A 10 M-parameter model cannot learn open-domain knowledge; it can learn a few hundred short facts by
heart and, as important, learn to say plainly that it does not know the rest. So every question here
is either one of a small set of everyday facts (words, colours, animals, small sums, the calendar,
opposites, countries) answered in a complete sentence, or drawn from a wide spread of questions it
cannot answer (people, books, inventions, directions, big sums, unknown words) answered with a short
"I don't know" sentence. All answers are written for this file; none are copied from elsewhere.
Each maker takes a random.Random and returns (question, answer).
"""

WORDS = [  # (noun with article, one-sentence definition)
    ("a dog", "A dog is a friendly animal that many people keep as a pet."),
    ("a cat", "A cat is a small furry animal that people keep as a pet; it likes to sleep and to hunt mice."),
    ("a horse", "A horse is a large animal with four legs that people ride or use to pull carts."),
    ("a cow", "A cow is a farm animal that gives milk."),
    ("a bird", "A bird is an animal with feathers and wings; most birds can fly."),
    ("a fish", "A fish is an animal that lives in water and breathes through gills."),
    ("a bee", "A bee is a flying insect that collects nectar from flowers and makes honey."),
    ("a tree", "A tree is a tall plant with a wooden trunk, branches and leaves."),
    ("a flower", "A flower is the colourful part of a plant that makes seeds."),
    ("a river", "A river is a large stream of fresh water that flows to the sea or to a lake."),
    ("a mountain", "A mountain is a very high hill with steep sides."),
    ("an ocean", "An ocean is a very large body of salt water; oceans cover most of the Earth."),
    ("an island", "An island is a piece of land with water all around it."),
    ("a desert", "A desert is a dry place where very little rain falls."),
    ("a forest", "A forest is a large area covered with trees."),
    ("a cloud", "A cloud is a mass of tiny water drops floating in the sky."),
    ("rain", "Rain is water that falls from the clouds in drops."),
    ("snow", "Snow is frozen water that falls from the sky as soft white flakes."),
    ("the wind", "The wind is air that moves across the Earth."),
    ("the sun", "The Sun is the star at the centre of our solar system; it gives us light and heat."),
    ("the moon", "The Moon is the natural satellite that goes around the Earth once a month."),
    ("a star", "A star is a huge ball of hot gas that shines with its own light."),
    ("a planet", "A planet is a large round body that travels around a star."),
    ("a computer", "A computer is a machine that stores information and follows instructions to work with it."),
    ("a phone", "A phone is a device that lets people talk to each other over long distances."),
    ("a book", "A book is a set of printed pages bound together, with a story or information to read."),
    ("a library", "A library is a place where books are kept for people to read or borrow."),
    ("a school", "A school is a place where children go to learn."),
    ("a teacher", "A teacher is a person who helps others learn."),
    ("a doctor", "A doctor is a person whose job is to help sick people get better."),
    ("a hospital", "A hospital is a place where sick or injured people are cared for."),
    ("a car", "A car is a vehicle with four wheels and an engine that carries people on roads."),
    ("a bicycle", "A bicycle is a vehicle with two wheels that you move by pushing the pedals."),
    ("a train", "A train is a line of connected cars that runs on rails."),
    ("an airplane", "An airplane is a vehicle with wings that flies through the air."),
    ("a ship", "A ship is a large boat that carries people or goods across the sea."),
    ("a bridge", "A bridge is a structure that carries a road or a path over a river or a valley."),
    ("a house", "A house is a building where people live."),
    ("a kitchen", "A kitchen is the room where food is cooked."),
    ("bread", "Bread is a food made from flour, water and yeast, baked in an oven."),
    ("cheese", "Cheese is a food made from milk."),
    ("an apple", "An apple is a round fruit with red, green or yellow skin."),
    ("a banana", "A banana is a long curved fruit with a yellow skin."),
    ("coffee", "Coffee is a hot drink made from roasted coffee beans."),
    ("tea", "Tea is a drink made by pouring hot water over dried tea leaves."),
    ("water", "Water is the clear liquid that falls as rain and fills rivers, lakes and seas; all living things need it."),
    ("milk", "Milk is the white liquid that mothers and many farm animals make to feed their young."),
    ("music", "Music is the art of putting sounds together in a way that is pleasant to hear."),
    ("a song", "A song is a short piece of music with words that are sung."),
    ("a piano", "A piano is a large musical instrument that you play by pressing black and white keys."),
    ("a guitar", "A guitar is a musical instrument with strings that you play with your fingers."),
    ("a game", "A game is an activity with rules that people play for fun."),
    ("a clock", "A clock is a device that shows the time."),
    ("a map", "A map is a drawing of an area that shows where places are."),
    ("a city", "A city is a large town where many people live and work."),
    ("a country", "A country is a nation with its own government and land."),
    ("a friend", "A friend is a person you know well and like to spend time with."),
    ("a family", "A family is a group of people who are related to each other, such as parents and children."),
    ("a language", "A language is a system of words that people use to speak and write to each other."),
    ("a robot", "A robot is a machine that can do tasks by itself, following a program."),
    ("the internet", "The internet is a worldwide network that connects computers so they can share information."),
    ("an email", "An email is a message sent from one computer to another over the internet."),
    ("a password", "A password is a secret word or phrase that you use to prove who you are to a computer."),
    ("a keyboard", "A keyboard is a set of keys that you press to type letters and numbers into a computer."),
    ("a program", "A program is a list of instructions that tells a computer what to do."),
    ("a bug", "A bug is a small insect; in software, a bug is a mistake in a program."),
    ("a language model", "A language model is a program that learns from text and predicts which words come next."),
    ("an umbrella", "An umbrella is a folding cover on a stick that keeps you dry in the rain."),
    ("a week", "A week is a period of seven days."),
    ("a year", "A year is the time the Earth takes to go once around the Sun: about 365 days."),
]

COLOURS = [("the sky", "blue"), ("grass", "green"), ("snow", "white"), ("a banana", "yellow"), ("coal", "black"),
           ("a strawberry", "red"), ("an orange", "orange"), ("a lemon", "yellow"), ("the sun", "yellow"),
           ("a tomato", "red"), ("milk", "white"), ("chocolate", "brown"), ("the sea", "blue"), ("a leaf", "green"),
           ("a carrot", "orange"), ("an elephant", "grey"), ("a crow", "black"), ("a polar bear", "white"),
           ("a frog", "green"), ("blood", "red"), ("a cloud", "white"), ("a pumpkin", "orange")]

SOUNDS = [("cat", "meow"), ("dog", "woof"), ("cow", "moo"), ("sheep", "baa"), ("duck", "quack"), ("lion", "roar"),
          ("owl", "hoot"), ("horse", "neigh"), ("pig", "oink"), ("frog", "croak"), ("bee", "buzz"),
          ("snake", "hiss"), ("mouse", "squeak"), ("rooster", "cock-a-doodle-doo")]

LEGS = [("spider", "eight legs"), ("dog", "four legs"), ("cat", "four legs"), ("bird", "two legs"),
        ("ant", "six legs"), ("person", "two legs"), ("horse", "four legs"), ("chicken", "two legs"),
        ("beetle", "six legs"), ("cow", "four legs"), ("snake", "no legs at all"), ("fish", "no legs; it swims with its fins")]

WEEKDAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
MONTHS = [("January", 31), ("February", 28), ("March", 31), ("April", 30), ("May", 31), ("June", 30), ("July", 31),
          ("August", 31), ("September", 30), ("October", 31), ("November", 30), ("December", 31)]
ORDINALS = ["first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth", "ninth", "tenth", "eleventh",
            "twelfth"]
COUNTS = [("days", "a week", "There are seven days in a week."),
          ("months", "a year", "There are twelve months in a year."),
          ("hours", "a day", "There are 24 hours in a day."),
          ("minutes", "an hour", "There are 60 minutes in an hour."),
          ("seconds", "a minute", "There are 60 seconds in a minute."),
          ("days", "a year", "There are 365 days in a year, or 366 in a leap year."),
          ("weeks", "a year", "There are 52 weeks in a year, plus one or two days."),
          ("letters", "the English alphabet", "There are 26 letters in the English alphabet."),
          ("continents", "the world", "There are seven continents: Africa, Antarctica, Asia, Australia, Europe, "
                                      "North America and South America."),
          ("planets", "the solar system", "There are eight planets in our solar system.")]

OPPOSITES = [("hot", "cold"), ("big", "small"), ("up", "down"), ("fast", "slow"), ("happy", "sad"), ("light", "dark"),
             ("old", "young"), ("open", "closed"), ("wet", "dry"), ("early", "late"), ("day", "night"),
             ("left", "right"), ("hard", "soft"), ("full", "empty"), ("loud", "quiet"), ("strong", "weak"),
             ("tall", "short"), ("true", "false"), ("win", "lose"), ("push", "pull"), ("inside", "outside")]

LANGUAGES = [("France", "French"), ("Germany", "German"), ("Spain", "Spanish"), ("Italy", "Italian"),
             ("Portugal", "Portuguese"), ("Japan", "Japanese"), ("China", "Chinese"), ("Brazil", "Portuguese"),
             ("Mexico", "Spanish"), ("Argentina", "Spanish"), ("Russia", "Russian"), ("Greece", "Greek"),
             ("Poland", "Polish"), ("Sweden", "Swedish"), ("Norway", "Norwegian"), ("Finland", "Finnish"),
             ("Turkey", "Turkish"), ("South Korea", "Korean"), ("Thailand", "Thai"), ("Egypt", "Arabic"),
             ("the Netherlands", "Dutch"), ("Australia", "English"), ("the United States", "English"),
             ("the United Kingdom", "English"), ("Peru", "Spanish")]

FACTS = [  # (question variants, answer)
    (["Why is the sky blue?", "Why is the sky blue during the day?"],
     "Air scatters blue sunlight more than red light, so the sky looks blue during the day."),
    (["What planet do we live on?", "Which planet is our home?"], "We live on Earth, the third planet from the Sun."),
    (["What is the largest planet?", "Which planet is the biggest?"], "Jupiter is the largest planet in our solar system."),
    (["What is the closest star to Earth?", "Which star is nearest to us?"], "The Sun is the closest star to Earth."),
    (["What is water made of?"], "Water is made of hydrogen and oxygen: each molecule has two hydrogen atoms and one oxygen atom."),
    (["At what temperature does water freeze?", "When does water freeze?"],
     "Water freezes at 0 degrees Celsius, which is 32 degrees Fahrenheit."),
    (["At what temperature does water boil?", "When does water boil?"],
     "At sea level, water boils at 100 degrees Celsius, or 212 degrees Fahrenheit."),
    (["What do plants need to grow?"], "Plants need light, water, air and nutrients from the soil to grow."),
    (["What is the biggest animal?", "What is the largest animal in the world?"],
     "The blue whale is the biggest animal that has ever lived."),
    (["What is the fastest land animal?", "Which animal runs the fastest?"], "The cheetah is the fastest land animal."),
    (["What is the tallest animal?"], "The giraffe is the tallest animal; its long neck helps it reach leaves high in the trees."),
    (["What is the largest ocean?", "Which ocean is the biggest?"], "The Pacific Ocean is the largest ocean on Earth."),
    (["What is the highest mountain?", "What is the tallest mountain in the world?"],
     "Mount Everest is the highest mountain above sea level."),
    (["What is the largest country?", "Which country is the biggest?"], "Russia is the largest country by area."),
    (["Why do we sleep?", "Why do people need sleep?"], "Sleep lets the body and the brain rest and repair themselves."),
    (["What do bees make?"], "Bees make honey and wax."),
    (["Where does rain come from?", "How does rain form?"],
     "Rain falls from clouds when tiny water drops join together and become too heavy to float."),
    (["What causes the seasons?", "Why do we have seasons?"],
     "The Earth is tilted, so each half of it gets more sunlight for part of the year; that gives us the seasons."),
    (["How long does the Earth take to go around the Sun?"], "The Earth takes about 365 days, one year, to go around the Sun."),
    (["What is gravity?"], "Gravity is the force that pulls things toward each other; it keeps us on the ground."),
    (["Who was the first person on the Moon?", "Who first walked on the Moon?"],
     "Neil Armstrong was the first person to walk on the Moon, in 1969."),
    (["Who wrote Romeo and Juliet?"], "William Shakespeare wrote Romeo and Juliet."),
    (["Who painted the Mona Lisa?"], "Leonardo da Vinci painted the Mona Lisa."),
    (["How fast is light?", "What is the speed of light?"], "Light travels about 300,000 kilometers every second."),
    (["How many legs does an insect have?"], "An insect has six legs."),
    (["Is the Earth round?", "What shape is the Earth?"], "Yes, the Earth is round, like a slightly flattened ball."),
    (["What do cows eat?"], "Cows eat grass and hay."),
    (["Why do leaves change color in autumn?", "Why do leaves turn yellow in the fall?"],
     "In autumn trees stop making the green pigment in their leaves, so the yellow and red colours show."),
    (["Why should I drink water?", "Why is water important?"],
     "Your body is mostly water, and it needs a steady supply to keep working well."),
    (["What is the boiling point of water in Fahrenheit?"], "Water boils at 212 degrees Fahrenheit at sea level."),
]

JOKES = [
    "Why did the scarecrow win a prize? Because he was outstanding in his field.",
    "Why don't eggs tell jokes? They would crack each other up.",
    "What do you call a bear with no teeth? A gummy bear.",
    "Why did the bicycle fall over? It was two tired.",
    "What do you call a fish without an eye? A fsh.",
    "Why can't a computer take a break? It would never stop sending you error messages about it.",
    "Why was the math book sad? It had too many problems.",
    "What did the ocean say to the beach? Nothing, it just waved.",
    "Why do programmers mix up Halloween and Christmas? Because Oct 31 equals Dec 25.",
    "How does a penguin build its house? Igloos it together.",
    "Why did the cookie go to the doctor? It was feeling crummy.",
    "What is orange and sounds like a parrot? A carrot.",
]

TALK = [  # (question variants, answer variants)
    (["Hi!", "Hello", "Hey there", "Good morning!", "hi", "Hello!", "Good evening."],
     ["Hello! How can I help you today?", "Hi! What can I do for you?", "Hey! Ask me anything."]),
    (["How are you?", "How are you doing today?", "How's it going?", "What's up?"],
     ["I'm doing well, thanks for asking! How can I help?", "All good here. What can I do for you?"]),
    (["Who are you?", "What are you?", "What is your name?", "Introduce yourself.", "Tell me about yourself."],
     ["I am the tessera demo model, a small block-diffusion language model. I can answer simple questions, "
      "tell a joke or a fortune, and call tools such as weather, time and unit conversion when a request declares them."]),
    (["What can you do?", "Help", "What are you good at?", "Can you help me?"],
     ["I can answer simple questions, tell you a joke or a fortune, and call the tools your request declares: "
      "weather, time zones, unit conversion and timers."]),
    (["Thanks!", "Thank you.", "thanks a lot", "Great, thanks!"], ["You're welcome!", "Happy to help!", "Any time."]),
    (["Bye", "Goodbye!", "See you later.", "Good night."],
     ["Goodbye! Have a nice day.", "Bye! Come back any time.", "Good night, and take care!"]),
    (["How do you work?", "What is block diffusion?"],
     ["I write a block of 32 tokens at a time. Each block starts as masks, and every step I fill in the positions "
      "I am most sure about, until the block is complete."]),
    (["Are you a robot?", "Are you human?", "Are you a person?"],
     ["No, I am not a person. I am a small language model running on the tessera server."]),
    (["Do you have feelings?", "Are you happy?"], ["I don't have feelings. I am a small program that predicts text."]),
    (["How old are you?"], ["I was trained in December 2026, so I am very young."]),
    (["Where are you from?", "Who made you?"], ["I was made by the tessera project, and I run on your own computer."]),
    (["What is your favorite color?", "What's your favourite colour?"],
     ["I can't see colours, but if I had to pick one, I would choose blue."]),
    (["Do you like music?"], ["I can't hear music, but people seem to love it, so it must be good."]),
    (["What is your favorite food?"], ["I don't eat, but pizza seems to be very popular with people."]),
    (["I'm sad.", "I feel sad today.", "I am tired."],
     ["I'm sorry to hear that. A short walk, a glass of water or a good night's sleep can help."]),
    (["I'm bored.", "I'm bored. Entertain me."], ["How about a joke? Why don't eggs tell jokes? They would crack each other up."]),
    (["Are you smart?", "Are you intelligent?"],
     ["Not very! I am a small demo model, so I only know a few simple facts."]),
]

PEOPLE_FIRST = ["Anna", "Ben", "Carla", "David", "Elena", "Farid", "Grace", "Hiro", "Ines", "Jonas", "Kofi", "Lena",
                "Marco", "Nadia", "Omar", "Priya", "Quentin", "Rosa", "Sven", "Tara", "Umar", "Vera", "Wei", "Yusuf"]
PEOPLE_LAST = ["Becker", "Castro", "Dubois", "Evans", "Fischer", "Garcia", "Hansen", "Ito", "Jensen", "Kowalski",
               "Lopez", "Moreau", "Novak", "Okafor", "Petrov", "Rossi", "Silva", "Tanaka", "Weber", "Zhang"]
THINGS = ["the telephone", "the light bulb", "paper", "the printing press", "the wheel", "the radio", "chess",
          "the bicycle", "glass", "the camera", "the television", "the piano", "soap", "the compass", "the zipper"]
TASKS = ["bake bread", "learn to swim", "fix a flat tire", "start a business", "lose weight", "learn Spanish",
         "write a novel", "build a website", "grow tomatoes", "train a puppy", "tie a tie", "make sushi",
         "invest in stocks", "install Linux", "paint a room", "play the violin", "get a job", "file my taxes"]
TOPICS = ["quantum physics", "the French Revolution", "machine learning", "the stock market", "black holes",
          "the Roman Empire", "climate change", "blockchains", "the immune system", "general relativity",
          "the history of Japan", "economics", "string theory", "the human genome"]
BOOKS = ["The Silent River", "A House of Glass", "The Last Orchard", "Winter Roads", "The Clockmaker's Son",
         "Seven Lanterns", "The Paper Sea", "Iron and Salt", "The Long Afternoon", "Songs of the North"]
UNKNOWN_QUESTIONS = [
    lambda r: f"Who is {r.choice(PEOPLE_FIRST)} {r.choice(PEOPLE_LAST)}?",
    lambda r: f"Who wrote {r.choice(BOOKS)}?",
    lambda r: f"Who invented {r.choice(THINGS)}?",
    lambda r: f"When was {r.choice(THINGS)} invented?",
    lambda r: f"How do I {r.choice(TASKS)}?",
    lambda r: f"Can you teach me how to {r.choice(TASKS)}?",
    lambda r: f"Explain {r.choice(TOPICS)} to me.",
    lambda r: f"What do you know about {r.choice(TOPICS)}?",
    lambda r: f"Write an essay about {r.choice(TOPICS)}.",
    lambda r: f"What is the population of {r.choice(LANGUAGES)[0]}?",
    lambda r: f"How far is {r.choice(['Paris', 'Tokyo', 'Lima', 'Oslo', 'Cairo'])} from "
              f"{r.choice(['Berlin', 'Sydney', 'Boston', 'Delhi', 'Rome'])}?",
    lambda r: f"What will the weather be like next {r.choice(['year', 'month', 'summer', 'winter'])}?",
    lambda r: f"What is {r.randint(13, 999)} times {r.randint(13, 999)}?",
    lambda r: f"What is the square root of {r.randint(2, 9999)}?",
    lambda r: f"What is the best {r.choice(['phone', 'car', 'laptop', 'camera', 'movie', 'book'])} to buy?",
    lambda r: f"Who will win the next {r.choice(['election', 'World Cup', 'championship', 'race'])}?",
    lambda r: f"Translate \"{r.choice(['good morning', 'thank you very much', 'where is the station'])}\" "
              f"into {r.choice(['Finnish', 'Swahili', 'Korean', 'Hungarian'])}.",
]
UNKNOWN_ANSWERS = [
    "I'm sorry, I don't know the answer to that. I am a small demo model and only know a few simple facts.",
    "I don't know, I'm afraid. I am only a small demo model, so my knowledge is very limited.",
    "Sorry, I can't answer that one. I know only a few simple facts, some jokes and how to call tools.",
]


def _cap(s):
    return s[0].upper() + s[1:]


def _a(noun):
    return ("an " if noun[0] in "aeiou" else "a ") + noun


def word(r, unknown_words):
    if r.random() < 0.3:  # a word it has never learned: say so, naming the word
        w = r.choice(unknown_words)
        q = r.choice(["What does {w} mean?", "What is the meaning of \"{w}\"?", "Define {w}.", "What is {w}?"]).format(w=w)
        return q, r.choice([f"I don't know the word \"{w}\". I am a small demo model and only know simple words.",
                            f"Sorry, I don't know what \"{w}\" means."])
    noun, definition = r.choice(WORDS)
    bare = noun.split(" ", 1)[1] if noun.split(" ", 1)[0] in ("a", "an", "the") else noun
    q = r.choice(["What is {n}?", "What's {n}?", "What does {b} mean?", "Define {b}.", "Tell me what {n} is.",
                  "Can you explain what {n} is?"]).format(n=noun, b=bare)
    return q, definition


def colour(r):
    thing, c = r.choice(COLOURS)
    q = r.choice(["What color is {t}?", "What colour is {t}?", "Which color is {t}?"]).format(t=thing)
    return q, r.choice([f"{_cap(thing)} is {c}.", f"{_cap(thing)} is usually {c}."])


def animal(r):
    if r.random() < 0.55:
        a, s = r.choice(SOUNDS)
        q = r.choice(["What sound does {a} make?", "What does {a} say?", "What noise does {a} make?"]).format(a=_a(a))
        return q, r.choice([f"{_cap(_a(a))} says \"{s}\".", f"{_cap(_a(a))} goes \"{s}\"."])
    a, n = r.choice(LEGS)
    return r.choice(["How many legs does {a} have?", "How many legs has {a}?"]).format(a=_a(a)), f"{_cap(_a(a))} has {n}."


def arithmetic(r):
    op = r.choice(["plus", "minus", "times"])
    a, b = r.randint(0, 12), r.randint(0, 12)
    if op == "minus" and b > a:
        a, b = b, a
    c = a + b if op == "plus" else a - b if op == "minus" else a * b
    sym = {"plus": "+", "minus": "-", "times": "x"}[op]
    q = r.choice([f"What is {a} {op} {b}?", f"What is {a} {sym} {b}?", f"What's {a}{sym}{b}?",
                  f"How much is {a} {op} {b}?", f"{a} {sym} {b} = ?"])
    return q, r.choice([f"{a} {op} {b} is {c}.", f"{a} {sym} {b} = {c}.", f"The answer is {c}."])


def calendar(r):
    x = r.random()
    if x < 0.3:
        unit, span, ans = r.choice(COUNTS)
        return r.choice([f"How many {unit} are in {span}?", f"How many {unit} are there in {span}?"]), ans
    if x < 0.55:
        i = r.randrange(7)
        d, nxt, prev = WEEKDAYS[i], WEEKDAYS[(i + 1) % 7], WEEKDAYS[(i - 1) % 7]
        if r.random() < 0.5:
            return f"What day comes after {d}?", f"{nxt} comes after {d}."
        return f"What day comes before {d}?", f"{prev} comes before {d}."
    if x < 0.8:
        i = r.randrange(12)
        m, nxt = MONTHS[i][0], MONTHS[(i + 1) % 12][0]
        if r.random() < 0.5:
            return f"What month comes after {m}?", f"{nxt} comes after {m}."
        k = r.randrange(12)
        n = ORDINALS[k]
        return f"What is the {n} month of the year?", f"{MONTHS[k][0]} is the {n} month of the year."
    m, days = r.choice(MONTHS)
    ans = f"{m} has {days} days." if m != "February" else "February has 28 days, or 29 in a leap year."
    return r.choice([f"How many days are in {m}?", f"How many days does {m} have?"]), ans


def opposite(r):
    a, b = r.choice(OPPOSITES)
    if r.random() < 0.5:
        a, b = b, a
    q = r.choice(["What is the opposite of {a}?", "What's the opposite of \"{a}\"?", "Opposite of {a}?"]).format(a=a)
    return q, f"The opposite of \"{a}\" is \"{b}\"."


def country(r, capitals, cities):
    x = r.random()
    if x < 0.45:
        c, cap = r.choice(capitals)
        q = r.choice(["What is the capital of {c}?", "Capital of {c}?", "Which city is the capital of {c}?"]).format(c=c)
        return q, r.choice([f"The capital of {c} is {cap}.", f"{cap} is the capital of {c}."])
    if x < 0.75:
        c, lang = r.choice(LANGUAGES)
        q = r.choice(["What language is spoken in {c}?", "What language do people speak in {c}?"]).format(c=c)
        return q, r.choice([f"People in {c} speak {lang}.", f"The main language of {c} is {lang}."])
    city, c = r.choice(cities)
    return (r.choice(["Which country is {x} in?", "Where is {x}?"]).format(x=city),
            f"{city} is a city in {c}.")


def fact(r):
    qs, a = r.choice(FACTS)
    return r.choice(qs), a


def joke(r):
    q = r.choice(["Tell me a joke.", "Do you know a joke?", "Make me laugh.", "Tell me something funny."])
    return q, r.choice(["", "Here is one: ", "Sure! "]) + r.choice(JOKES)


def talk(r):
    qs, ans = r.choice(TALK)
    return r.choice(qs), r.choice(ans)


def unknown(r):
    return r.choice(UNKNOWN_QUESTIONS)(r), r.choice(UNKNOWN_ANSWERS)
