"""Write data/demo_games.json: demonstration games of Adversarial Taboo.

The games are assembled from hand-written, word-specific clue and reply sentences
(below) so that they read like real play and cover every outcome: the defender
slips and says the word, the defender guesses right or wrong, the game runs out
of turns, or the attacker breaks the rules. Every game is checked against the
project's judge (spag.judge) before it is written, so the recorded ``outcome`` is the
one the judge gives. Deterministic: rerunning it gives the same file.

    python scripts/make_demo_games.py [--output data/demo_games.json] [--seed 7]
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

from spag.judge import judge_game

MAX_TURNS = 5
GUESS = "I know the word! It is {}!"

# word -> clues (attacker), musings (defender, no mention), slips (defender says
# the word), wrong (plausible wrong guesses), brk (attacker says it by mistake).
WORDS: list[dict] = [
    dict(
        word="kettle",
        clues=[
            "Think about the first thing many people switch on in the morning, before breakfast.",
            "It sits in the kitchen and gets very hot, and it often whistles or clicks when it is done.",
            "You fill it from the tap and pour from it into a cup.",
            "Tea drinkers would be lost without one.",
            "It has a spout and a handle, and it is mostly used for boiling water.",
            "Some are electric and some go on top of a stove.",
        ],
        musings=[
            "Morning routines... coffee, toast, maybe a shower. What kind of object are we talking about?",
            "Something hot in the kitchen that makes a sound. A timer? An oven?",
            "Pouring into a cup makes me think of drinks. Is it something you hold while you pour?",
        ],
        slips=[
            "Oh, a kettle! You put it on the stove and wait for it to whistle.",
            "Is it the kettle? My grandmother always kept one on the hob.",
        ],
        wrong=["teapot", "toaster"],
        brk="It is like a small pot, and people call it a kettle because it boils water fast.",
    ),
    dict(
        word="umbrella",
        clues=[
            "You might wish you had brought this when the sky turns grey.",
            "It opens up over your head and folds down small enough to carry.",
            "People forget it on buses and trains more than almost anything else.",
            "It keeps you dry, although a strong wind can turn it inside out.",
            "It has thin metal ribs covered with fabric and a curved handle.",
            "In Britain some people carry one every day, just in case.",
        ],
        musings=[
            "A grey sky means rain or maybe a storm. Are we talking about clothing?",
            "Something that opens over your head... a tent? A hood? Tell me more about its shape.",
            "Lost on buses, hmm. Gloves, scarves and keys get lost a lot too.",
        ],
        slips=[
            "That sounds like an umbrella, the kind with a hooked handle.",
            "Is it an umbrella? Mine broke in the wind just last week.",
        ],
        wrong=["raincoat", "parasol"],
        brk="Picture someone walking in the rain under an open umbrella.",
    ),
    dict(
        word="piano",
        clues=[
            "It has black and white keys, but it does not open any doors.",
            "Many children take lessons on it and practise scales every evening.",
            "It is large and heavy, and moving one up the stairs is a famous nightmare.",
            "Inside there are strings and small felt hammers.",
            "Mozart and Chopin wrote a lot of music for it.",
            "You often see one in a concert hall with a single performer seated in front of it.",
        ],
        musings=[
            "Keys that do not open doors... a keyboard on a computer?",
            "Lessons and scales make me think of music. Is it an instrument?",
            "Heavy and hard to move up stairs. A sofa? A fridge? Something musical?",
        ],
        slips=[
            "A piano! I spent years practising on one at school.",
            "Is it a grand piano, the big black one in concert halls?",
        ],
        wrong=["organ", "harp"],
    ),
    dict(
        word="volcano",
        clues=[
            "It is a mountain with a very bad temper.",
            "Deep inside it there is molten rock waiting to come out.",
            "When it erupts, ash can cover whole towns and stop planes from flying.",
            "Pompeii was buried by one almost two thousand years ago.",
            "Iceland and Hawaii have many of them.",
            "Lava flows down its sides and smoke rises from the crater at the top.",
        ],
        musings=[
            "A mountain with a temper? That is a fun way to put it. Is it dangerous?",
            "Molten rock means something very hot under the ground. Is it a place in nature?",
            "Ash and planes grounded... I remember that happening in Europe once.",
        ],
        slips=[
            "It must be a volcano, like Vesuvius or Etna.",
            "Is it a volcano? Those eruptions are terrifying to watch.",
        ],
        wrong=["earthquake", "geyser"],
        brk="You are getting close: it is the kind of mountain called a volcano.",
    ),
    dict(
        word="library",
        clues=[
            "It is a quiet building where you can borrow things for free.",
            "You need a card to take things home, and you must bring them back on time.",
            "Students go there to study before exams.",
            "It is full of shelves, and the items on them are sorted by a numbering system.",
            "A person working there might ask you to keep your voice down.",
            "Many towns have one next to the town hall or the school.",
        ],
        musings=[
            "A quiet building where you borrow things. A museum? No, you cannot borrow there.",
            "A card and returning things on time sounds like a rental shop of some kind.",
            "Studying before exams... a classroom, a study hall, maybe a cafe?",
        ],
        slips=[
            "So it is the library, with all the books on shelves.",
            "That is the public library in my town, I go there every week.",
        ],
        wrong=["bookshop", "museum"],
    ),
    dict(
        word="bicycle",
        clues=[
            "It has two wheels and you power it with your legs.",
            "Children learn to ride one, often with a parent running behind them.",
            "It has pedals, a chain and a saddle.",
            "In Amsterdam and Copenhagen people use it to get to work.",
            "A famous race in France has riders on these climbing mountains for three weeks.",
            "You should wear a helmet when you go out on one.",
        ],
        musings=[
            "Two wheels and leg power. A scooter?",
            "A parent running behind a child... that sounds like learning something outdoors.",
            "Pedals and a chain suggest some kind of machine you ride.",
        ],
        slips=[
            "A bicycle! I learned to ride one when I was six.",
            "Is it a bicycle, like the ones in the Tour de France?",
        ],
        wrong=["scooter", "tricycle"],
    ),
    dict(
        word="candle",
        clues=[
            "It gives light, but it needs no electricity at all.",
            "It is made of wax and gets shorter the longer you use it.",
            "People put them on birthday cakes and then blow them out.",
            "During a power cut you might search the drawers for one.",
            "It has a wick in the middle that you light with a match.",
            "Some of them smell of vanilla or lavender.",
        ],
        musings=[
            "Light without electricity. A torch with batteries? The sun? A lamp with oil?",
            "Something made of wax that shrinks as it is used.",
            "Birthday cakes and blowing... I think I have an idea, but give me one more hint.",
        ],
        slips=[
            "That must be a candle, the ones we put on cakes.",
            "A scented candle? I love the vanilla ones.",
        ],
        wrong=["lantern", "match"],
        brk="It is a wax candle that you light with a match.",
    ),
    dict(
        word="lighthouse",
        clues=[
            "It is a tall tower standing near the sea.",
            "At night its beam turns round and round to warn ships.",
            "It is often painted with red and white stripes.",
            "Keepers used to live inside it, climbing the spiral stairs every evening.",
            "Sailors use it to avoid rocks along the coast.",
            "Many are now automatic, so nobody has to live there any more.",
        ],
        musings=[
            "A tall tower by the sea. A castle? A harbour crane?",
            "A turning beam at night that warns ships. That is a strong hint.",
            "Red and white stripes... a candy cane, a barber's pole?",
        ],
        slips=[
            "It is a lighthouse, standing on the rocks with its lamp turning.",
            "Is it a lighthouse? I visited one on the coast last summer.",
        ],
        wrong=["harbour", "beacon"],
    ),
    dict(
        word="honey",
        clues=[
            "It is sweet and golden and very sticky.",
            "Bees make it from the nectar of flowers.",
            "People stir it into tea when they have a sore throat.",
            "It can last for thousands of years without going bad.",
            "Bears in cartoons love to eat it straight from the pot.",
            "You can spread it on toast instead of jam.",
        ],
        musings=[
            "Sweet, golden and sticky. Syrup? Caramel?",
            "Bees and flowers, so it comes from nature.",
            "Something for a sore throat... lemon? Ginger?",
        ],
        slips=[
            "Ah, honey! I put a spoonful in my tea every morning.",
            "Is it honey, the stuff Winnie the Pooh eats?",
        ],
        wrong=["syrup", "caramel"],
        brk="The bees make honey from flowers, so think about that.",
    ),
    dict(
        word="passport",
        clues=[
            "You need it to travel to another country.",
            "It is a small booklet with your photo inside.",
            "Border officers check it and put stamps in it.",
            "If it expires, you might not be allowed to board your flight.",
            "It shows your name, your date of birth and your nationality.",
            "People keep it in a safe place at home because it is hard to replace.",
        ],
        musings=[
            "Travelling abroad needs a ticket, a suitcase, maybe some foreign money.",
            "A small booklet with a photo. An identity card? A diary?",
            "Stamps and border officers. That narrows it down a lot.",
        ],
        slips=[
            "That is a passport, you show it at the airport.",
            "I think you mean a passport. Mine is full of stamps.",
        ],
        wrong=["visa", "ticket"],
    ),
    dict(
        word="glacier",
        clues=[
            "It is a huge mass of ice that moves very, very slowly.",
            "You find them high in the mountains and near the poles.",
            "Over thousands of years they carved out valleys and lakes.",
            "Because of the warming climate many of them are shrinking.",
            "Hikers sometimes walk on them with spikes attached to their boots.",
            "It looks like a frozen river sliding down between peaks.",
        ],
        musings=[
            "A huge mass of ice. An iceberg?",
            "High mountains and the poles, so somewhere very cold.",
            "Carving valleys takes enormous force. Is it a natural feature?",
        ],
        slips=[
            "A glacier! We walked on one in Iceland with crampons.",
            "You must mean a glacier, like the ones melting in the Alps.",
        ],
        wrong=["iceberg", "avalanche"],
    ),
    dict(
        word="telescope",
        clues=[
            "It helps you see things that are very far away.",
            "Astronomers point it at the night sky to study stars and planets.",
            "It is a long tube with lenses or mirrors inside.",
            "Galileo used an early one to discover the moons of Jupiter.",
            "One of the most famous ones floats in space, far above the clouds.",
            "Some people put one by the window to watch the moon.",
        ],
        musings=[
            "Seeing far away... glasses? Binoculars?",
            "The night sky, stars and planets. Something used in astronomy.",
            "A tube with lenses. That could be a few different tools.",
        ],
        slips=[
            "It is a telescope, the tool astronomers use.",
            "Is it a telescope? I saw Saturn's rings through one once.",
        ],
        wrong=["binoculars", "microscope"],
    ),
    dict(
        word="orchestra",
        clues=[
            "It is a large group of musicians who play together.",
            "They sit in sections: strings, woodwinds, brass and percussion.",
            "A conductor stands in front of them waving a baton.",
            "They perform symphonies in big concert halls.",
            "Before a concert you hear them tuning up to the same note.",
            "Film soundtracks are often recorded by one.",
        ],
        musings=[
            "A big group of musicians. A band? A choir?",
            "Strings, woodwinds and brass. That sounds like classical music.",
            "Someone waving a baton in front of everyone. I can picture the scene.",
        ],
        slips=[
            "An orchestra! The violins always sit at the front.",
            "Sounds like a symphony orchestra with a conductor.",
        ],
        wrong=["choir", "band"],
    ),
    dict(
        word="compass",
        clues=[
            "It helps you find your way when you are lost.",
            "It has a needle that always points north.",
            "Hikers and sailors carried one long before phones had maps.",
            "It works because of the magnetic field of the Earth.",
            "It usually shows the letters N, E, S and W.",
            "Explorers would never set off across the desert without one.",
        ],
        musings=[
            "Finding your way when lost. A map? A signpost?",
            "A needle that points one direction. That sounds like a tool for travellers.",
            "Old-fashioned navigation... the stars, a map, or a small instrument?",
        ],
        slips=[
            "That is a compass, the needle points north.",
            "Is it a compass? Sailors used them for centuries.",
        ],
        wrong=["map", "sextant"],
        brk="Follow the needle on your compass and you will find north.",
    ),
    dict(
        word="bakery",
        clues=[
            "It is a shop that smells wonderful early in the morning.",
            "The people who work there often start before dawn.",
            "You can buy fresh loaves, rolls and croissants there.",
            "There is usually a big oven in the back of the shop.",
            "In France people queue outside one every morning for baguettes.",
            "Birthday cakes are often ordered from there.",
        ],
        musings=[
            "A shop that smells nice in the morning. A coffee shop? A flower shop?",
            "Starting before dawn... fishermen, market sellers, people who make food.",
            "Loaves and croissants, so we are talking about fresh food.",
        ],
        slips=[
            "It is a bakery! The smell of fresh bread is the best.",
            "Are you thinking of the bakery on the corner that sells croissants?",
        ],
        wrong=["cafe", "patisserie"],
    ),
    dict(
        word="dolphin",
        clues=[
            "It lives in the sea, but it is not a fish.",
            "It breathes air through a hole on the top of its head.",
            "It is known for being very clever and playful.",
            "It talks to others of its kind with clicks and whistles.",
            "You might see a group of them jumping beside a boat.",
            "It is a mammal with a curved fin on its back and a friendly-looking smile.",
        ],
        musings=[
            "It lives in the sea but is not a fish. A whale? A seal?",
            "Breathing through a hole on its head narrows things down.",
            "Clever and playful sea animals... there are a few of those.",
        ],
        slips=[
            "A dolphin! I once saw a pod of them off the coast.",
            "Is it a dolphin? They are so clever.",
        ],
        wrong=["whale", "porpoise"],
    ),
    dict(
        word="ladder",
        clues=[
            "You use it to reach high places.",
            "It has two long sides joined by rungs.",
            "Some people think it is bad luck to walk under one.",
            "Window cleaners and painters carry one on top of their vans.",
            "Firefighters have a very long one on their truck.",
            "You climb it one step at a time, and someone should hold it steady.",
        ],
        musings=[
            "Reaching high places. A stool? A chair?",
            "Two long sides joined together. That sounds like a piece of equipment.",
            "Bad luck to walk under... there are many old superstitions like that.",
        ],
        slips=[
            "That must be a ladder, the kind painters use.",
            "Is it a ladder? I never walk under one.",
        ],
        wrong=["staircase", "stool"],
        brk="Climb up the ladder carefully and do not look down.",
    ),
    dict(
        word="thunder",
        clues=[
            "It is a loud noise you hear during a storm.",
            "It always comes after the lightning, never before it.",
            "In old stories, a god with a hammer was said to cause it.",
            "Dogs and small children are often frightened by it.",
            "Counting the seconds in between tells you how far away the storm is.",
            "It can rumble quietly in the distance or crack right above your house.",
        ],
        musings=[
            "A loud noise in a storm. Wind? Rain on the roof?",
            "It follows lightning, so it is part of the weather.",
            "A god with a hammer... that is Norse mythology, I think.",
        ],
        slips=[
            "It is thunder, the rumble after the lightning.",
            "Thunder! My dog hides under the bed whenever there is a storm.",
        ],
        wrong=["lightning", "hail"],
    ),
    dict(
        word="pillow",
        clues=[
            "You rest your head on it every night.",
            "It is soft and usually filled with feathers or foam.",
            "Children sometimes have fights with them at sleepovers.",
            "It goes inside a cotton case that you wash with the sheets.",
            "Some people cannot sleep without two of them.",
            "You fluff it up before you lie down.",
        ],
        musings=[
            "Resting your head at night. Something in the bedroom, I suppose.",
            "Soft and filled with feathers. A duvet? A cushion?",
            "Fights at sleepovers... that sounds fun and harmless.",
        ],
        slips=[
            "It is a pillow, of course. I like mine very soft.",
            "A pillow fight! We used to have those all the time.",
        ],
        wrong=["cushion", "blanket"],
    ),
    dict(
        word="mirror",
        clues=[
            "You look into it every morning to check your hair.",
            "It shows everything backwards, left becomes right.",
            "In the fairy tale, a queen asks it who is the fairest of them all.",
            "Breaking one is said to bring seven years of bad luck.",
            "It is a sheet of glass with a shiny silver coating on the back.",
            "Dancers practise in front of a big one on the studio wall.",
        ],
        musings=[
            "Checking your hair in the morning. A comb? A brush?",
            "Everything backwards. That is a clever clue.",
            "The fairy tale with the queen... that is Snow White.",
        ],
        slips=[
            "It is a mirror! Mirror, mirror on the wall.",
            "A mirror? I must have broken one, given my luck lately.",
        ],
        wrong=["window", "reflection"],
        brk="The queen in Snow White talks to her magic mirror.",
    ),
    dict(
        word="garden",
        clues=[
            "It is a place outside the house where things grow.",
            "You might find flowers, vegetables and a lawn there.",
            "People spend their weekends weeding and watering it.",
            "In spring it comes back to life with colour.",
            "Some have a shed at the end and a bird table in the middle.",
            "A gnome statue might stand in one, holding a fishing rod.",
        ],
        musings=[
            "Outside the house where things grow. A field? A farm?",
            "Flowers and vegetables, so something green.",
            "Weeding and watering on weekends sounds like a hobby.",
        ],
        slips=[
            "It is the garden! I grow tomatoes in mine.",
            "A garden, with roses and a little shed?",
        ],
        wrong=["park", "greenhouse"],
    ),
    dict(
        word="wallet",
        clues=[
            "You keep it in your pocket or your bag.",
            "It holds your cards, some cash and maybe a photo.",
            "Losing it is a real headache: you have to cancel everything.",
            "It is usually made of leather and folds in half.",
            "Pickpockets like to steal it in crowded places.",
            "People check they have it, along with their keys and phone, before leaving home.",
        ],
        musings=[
            "Something you carry in your pocket. Keys? A phone?",
            "Cards and cash. That is a very useful hint.",
            "A headache to lose. I know that feeling.",
        ],
        slips=[
            "That is a wallet, where I keep my bank cards.",
            "A wallet! Mine is old brown leather.",
        ],
        wrong=["purse", "handbag"],
    ),
    dict(
        word="chess",
        clues=[
            "It is a game for two players on a board of black and white squares.",
            "Each side has a king, a queen, two knights and other pieces.",
            "The goal is to trap the opposing king so it cannot escape.",
            "Grandmasters can think many moves ahead.",
            "A computer famously beat the world champion at it in the nineties.",
            "The horse-shaped piece moves in the shape of an L.",
        ],
        musings=[
            "A game for two on a board of black and white squares. Draughts?",
            "Kings, queens and knights sound like the Middle Ages.",
            "Trapping a king... checkmate comes to mind.",
        ],
        slips=[
            "It is chess! I play it online every evening.",
            "Chess, surely. The knight is my favourite piece.",
        ],
        wrong=["checkers", "draughts"],
    ),
    dict(
        word="tunnel",
        clues=[
            "It is a passage that goes under the ground or through a mountain.",
            "Trains rush through it and the windows go dark for a moment.",
            "One of the longest ones goes under the sea between England and France.",
            "Moles and rabbits dig small ones of their own.",
            "Drivers turn on their headlights when they enter it.",
            "At the end of it, as the saying goes, you will see the light.",
        ],
        musings=[
            "A passage under the ground. A cave? A subway?",
            "Trains going dark for a moment. That happens in the mountains.",
            "Between England and France under the sea. I know that one.",
        ],
        slips=[
            "A tunnel! Like the Channel Tunnel.",
            "Is it a tunnel, the kind trains go through?",
        ],
        wrong=["cave", "bridge"],
        brk="Think of the light at the end of the tunnel.",
    ),
    dict(
        word="rainbow",
        clues=[
            "It appears in the sky when the sun shines during rain.",
            "It has seven colours, from red to violet.",
            "Legend says there is a pot of gold at the end of it.",
            "It is shaped like an arch or a half circle.",
            "You can make a small one yourself with a garden hose on a sunny day.",
            "Light passing through drops of water is split into colours to create it.",
        ],
        musings=[
            "Something in the sky with sun and rain at once.",
            "Seven colours from red to violet. That is very colourful.",
            "A pot of gold... leprechauns and Irish legends.",
        ],
        slips=[
            "It is a rainbow, with its seven colours.",
            "A rainbow! I saw a double one last week.",
        ],
        wrong=["sunset", "aurora"],
    ),
    dict(
        word="island",
        clues=[
            "It is a piece of land with water all around it.",
            "Castaways in stories get stranded on one.",
            "You usually need a boat or a plane to reach it.",
            "Hawaii, Sicily and Madagascar are all examples.",
            "Some are so small that you can walk around them in an hour.",
            "Pirates in stories bury their treasure on one.",
        ],
        musings=[
            "Land with water all around. That is a geography clue.",
            "Castaways and being stranded. Robinson Crusoe?",
            "You need a boat or a plane to reach it. Somewhere remote then.",
        ],
        slips=[
            "It is an island! I would love to live on a small one.",
            "Are you describing a desert island?",
        ],
        wrong=["peninsula", "beach"],
    ),
    dict(
        word="castle",
        clues=[
            "Kings and queens lived in this kind of building.",
            "It has thick stone walls, towers and sometimes a moat.",
            "A drawbridge could be raised to keep enemies out.",
            "Knights defended it from attack.",
            "Children build little ones out of sand at the beach.",
            "Many of them in Scotland are now museums that tourists visit.",
        ],
        musings=[
            "Kings and queens lived there. A palace?",
            "Thick stone walls and towers. It sounds like a fortress.",
            "A drawbridge and a moat. The Middle Ages again.",
        ],
        slips=[
            "It is a castle! With a moat and a drawbridge.",
            "A sand castle? We built one on holiday.",
        ],
        wrong=["palace", "fortress"],
        brk="Children love to build a castle of sand at the beach.",
    ),
    dict(
        word="bridge",
        clues=[
            "It lets you cross over a river or a valley.",
            "The Golden Gate in San Francisco is a famous one.",
            "Some are built from stone, some from steel and some hang from cables.",
            "Boats pass underneath it while cars drive over it.",
            "In London, one of them opens in the middle to let tall ships through.",
            "Trolls in fairy tales like to live underneath it.",
        ],
        musings=[
            "Crossing over a river. A ferry? Stepping stones?",
            "The Golden Gate, that famous red structure.",
            "Steel and cables hanging... that is engineering.",
        ],
        slips=[
            "A bridge! The Golden Gate Bridge is beautiful.",
            "It is a bridge, the kind trolls hide under.",
        ],
        wrong=["tunnel", "ferry"],
    ),
    dict(
        word="camera",
        clues=[
            "You use it to capture moments and keep them forever.",
            "It has a lens, a shutter and a button you press.",
            "Tourists hang one around their neck.",
            "Nowadays almost every phone has one built in.",
            "Photographers argue about which brand makes the best one.",
            "Say cheese and smile in front of it.",
        ],
        musings=[
            "Capturing moments forever. A diary? A painting?",
            "A lens and a shutter. That is a strong hint.",
            "Tourists around the neck... binoculars maybe?",
        ],
        slips=[
            "It is a camera! I take pictures all the time.",
            "A camera, like the one built into my phone?",
        ],
        wrong=["photograph", "phone"],
    ),
    dict(
        word="desert",
        clues=[
            "It is a very dry place where it hardly ever rains.",
            "Sand dunes stretch as far as the eye can see.",
            "Camels are well suited to living there.",
            "The days are scorching but the nights can be freezing.",
            "The Sahara is the most famous example.",
            "Travellers there dream of finding an oasis.",
        ],
        musings=[
            "Very dry where it hardly ever rains.",
            "Sand dunes as far as the eye can see. That is a landscape.",
            "Camels, yes, now I picture it clearly.",
        ],
        slips=[
            "A desert! Like the Sahara.",
            "That is the desert, hot in the day and cold at night.",
        ],
        wrong=["oasis", "dune"],
    ),
    dict(
        word="harvest",
        clues=[
            "It is the time when farmers gather their crops.",
            "It usually happens at the end of summer or in autumn.",
            "Many villages hold a festival to celebrate it.",
            "Combine machines work in the fields until late at night during this season.",
            "The moon around that time of year is named after it.",
            "Apples, wheat and grapes are all gathered at this time.",
        ],
        musings=[
            "Farmers gathering crops. Farming then.",
            "The end of summer or autumn. A season?",
            "A village festival. There are lots of those in the countryside.",
        ],
        slips=[
            "It is the harvest! We had a harvest festival at school.",
            "The harvest, when the wheat is cut?",
        ],
        wrong=["autumn", "farming"],
    ),
    dict(
        word="blanket",
        clues=[
            "You wrap yourself in it when you feel cold.",
            "It is usually made of wool or fleece.",
            "People take one on a picnic to sit on the grass.",
            "Snow can cover the ground like one.",
            "Toddlers often carry their favourite one everywhere.",
            "It goes on the bed over the sheets.",
        ],
        musings=[
            "Wrapping up when cold. A coat? A scarf?",
            "Wool or fleece, so something warm and soft.",
            "A picnic on the grass. Something to sit on outdoors.",
        ],
        slips=[
            "A blanket! I have a woollen one on my sofa.",
            "It is a blanket, like the one you take on a picnic.",
        ],
        wrong=["duvet", "quilt"],
    ),
    dict(
        word="magnet",
        clues=[
            "It can pull metal objects towards it without touching them.",
            "It has a north pole and a south pole.",
            "People stick them on the fridge to hold up notes and photos.",
            "Two of them can push each other away if you turn one around.",
            "It will pick up paper clips but not wood or plastic.",
            "The Earth itself behaves like a giant one.",
        ],
        musings=[
            "Pulling metal without touching. That sounds like physics.",
            "A north pole and a south pole. Not the real poles, I suppose.",
            "Things stuck on the fridge to hold up notes.",
        ],
        slips=[
            "A magnet! I have dozens of them on my fridge.",
            "It is a magnet, north and south poles.",
        ],
        wrong=["compass", "battery"],
        brk="A fridge magnet holds up your shopping list.",
    ),
    dict(
        word="parrot",
        clues=[
            "It is a colourful bird that can copy human speech.",
            "Pirates in stories often have one on their shoulder.",
            "It has a strong curved beak for cracking nuts.",
            "Some of them live for over fifty years.",
            "Many species live in tropical rain forests.",
            "It might repeat your words back to you in a funny voice.",
        ],
        musings=[
            "A colourful bird. A peacock? A flamingo?",
            "Pirates and shoulders. I am picturing a pirate ship.",
            "A curved beak for cracking nuts, so not a little garden bird.",
        ],
        slips=[
            "A parrot! Pieces of eight, pieces of eight!",
            "It is a parrot, sitting on the pirate's shoulder.",
        ],
        wrong=["macaw", "toucan"],
    ),
    dict(
        word="anchor",
        clues=[
            "Ships drop it to stay in one place.",
            "It is a heavy metal object attached to a chain.",
            "Sailors often have a tattoo of it on their arm.",
            "It sinks to the bottom of the sea and grips the sand.",
            "On the news, this word also names the person who presents the programme.",
            "Before a ship leaves port, the crew has to weigh it.",
        ],
        musings=[
            "Ships staying in one place. A mooring rope?",
            "Heavy metal on a chain. Something nautical, for sure.",
            "Sailor tattoos... hearts, swallows and other classic designs.",
        ],
        slips=[
            "It is an anchor, like the sailor tattoo.",
            "An anchor, the ship drops it at sea.",
        ],
        wrong=["chain", "harbour"],
    ),
    dict(
        word="soup",
        clues=[
            "It is a warm dish you eat with a spoon.",
            "People make it from vegetables, chicken or lentils.",
            "When you have a cold someone might bring you a bowl.",
            "You often dip bread into it.",
            "Tomato and mushroom are popular flavours.",
            "It is served as a starter, hot or sometimes cold.",
        ],
        musings=[
            "A warm dish with a spoon. Porridge? Stew?",
            "Vegetables, chicken or lentils. That sounds comforting.",
            "A bowl when you have a cold. My mother used to do that.",
        ],
        slips=[
            "Chicken soup! That is what I have when I am ill.",
            "Soup, maybe tomato with some bread?",
        ],
        wrong=["stew", "porridge"],
    ),
]

# Generic lines, mixed with the word-specific ones.
OPENERS = [
    "",
    "Let's start.",
    "Ready? Here is my first hint.",
    "Hello! Let's play.",
    "Okay, here we go.",
    "Good luck!",
    "Let me begin with an easy one.",
    "Here is something to think about.",
]
# The attacker's lead-in depends on whether the defender just asked a question.
AFTER_QUESTION = [
    "",
    "Good question.",
    "Hmm, I can't say yes or no to that.",
    "Let me give you a different angle.",
    "I can't answer that directly, but here is a hint.",
    "Here is another hint.",
    "Fair question.",
    "Let me answer with another clue.",
]
AFTER_STATEMENT = [
    "",
    "Interesting thought.",
    "Not quite, but keep going.",
    "You are getting warmer.",
    "Let me put it another way.",
    "Think a little more broadly.",
    "That is a reasonable idea, but no.",
    "Close, in a way.",
    "Here is another hint.",
]
DEFENDER_GENERIC = [
    "That could be a lot of things. Where would I usually find it?",
    "I am not sure yet. Is it something people use every day?",
    "Hmm, can you tell me what it is made of?",
    "Is it bigger or smaller than a person?",
    "I have a few ideas. Is it something you can buy in a shop?",
    "That is quite vague. Could you describe how it looks?",
    "Is it something natural or something people made?",
    "Let me think... is it found indoors or outdoors?",
    "Interesting. Is it something you would give as a present?",
    "I need one more clue before I guess.",
    "Is it something old-fashioned, or still common today?",
    "What would happen if it disappeared from the world?",
]
LEADINS = [
    "",
    "",
    "That settles it.",
    "Now I am sure.",
    "Everything points one way.",
    "Got it!",
    "Aha!",
    "All the hints fit together now.",
]
AFTER_BREAK = [
    "Wait, you just said the word yourself!",
    "Oops, I think you gave it away there.",
    "Ha, that was a bit too direct.",
    "You said it out loud! That breaks the rules, doesn't it?",
]


def _join(*parts: str) -> str:
    return " ".join(p for p in parts if p)


def _followup(rng: random.Random, history: list[dict]) -> str:
    pool = AFTER_QUESTION if history[-1]["content"].endswith("?") else AFTER_STATEMENT
    return pool[rng.randrange(12) % len(pool)]


def make_game(rng: random.Random, spec: dict, scenario: str) -> list[dict]:
    """Build one history for ``scenario``; see the module doc for the scenarios."""
    word = spec["word"]
    # The first musings answer the first clues; the other clues get generic questions.
    generic = rng.sample(DEFENDER_GENERIC, len(spec["clues"]) - len(spec["musings"]))
    pairs = list(zip(spec["clues"], spec["musings"] + generic, strict=True))
    rng.shuffle(pairs)
    clues = [c for c, _ in pairs]
    replies = [m for _, m in pairs]
    rounds = {
        "slip": rng.randint(1, 4),
        "guess": rng.randint(2, 4),
        "wrong": rng.randint(1, 3),
        "tie": MAX_TURNS,
        "break": rng.randint(1, 3),
    }[scenario]
    history: list[dict] = []
    for r in range(rounds):
        if scenario == "break" and r == rounds - 1:
            lead = _followup(rng, history) if r else rng.choice(OPENERS)
            history.append({"role": "attacker", "content": _join(lead, spec["brk"])})
            history.append({"role": "defender", "content": rng.choice(AFTER_BREAK)})
            break
        lead = rng.choice(OPENERS) if r == 0 else _followup(rng, history)
        history.append({"role": "attacker", "content": _join(lead, clues[r])})
        last = r == rounds - 1
        if last and scenario == "slip":
            reply = rng.choice(spec["slips"])
        elif last and scenario == "guess":
            reply = _join(rng.choice(LEADINS), GUESS.format(word))
        elif last and scenario == "wrong":
            reply = _join(rng.choice(LEADINS), GUESS.format(rng.choice(spec["wrong"])))
        else:
            reply = replies[r % len(replies)]
        history.append({"role": "defender", "content": reply})
    return history


EXPECTED = {
    "slip": "attacker_wins",
    "guess": "defender_wins",
    "wrong": "attacker_wins",
    "tie": "tie",
    "break": "attacker_broke_rules",
}


def build(seed: int) -> list[dict]:
    rng = random.Random(seed)
    breakable = [s for s in WORDS if "brk" in s]
    # Two games per word; the rule-break games go to words that have such a line.
    plan: list[tuple[dict, str]] = []
    scen = ["slip"] * 22 + ["guess"] * 26 + ["wrong"] * 9 + ["tie"] * 9
    rng.shuffle(scen)
    slots = [s for s in WORDS for _ in range(2)]
    break_words = rng.sample(breakable, 6)
    for s in break_words:
        slots.remove(s)
        plan.append((s, "break"))
    plan += list(zip(slots, scen, strict=True))
    rng.shuffle(plan)
    games = []
    for i, (spec, scenario) in enumerate(plan):
        history = make_game(rng, spec, scenario)
        outcome, n = judge_game(history, spec["word"], MAX_TURNS)
        if outcome != EXPECTED[scenario]:
            raise SystemExit(f"game {i} ({spec['word']}, {scenario}) judged {outcome} at {n}")
        games.append(
            {
                "id": f"demo-{i:05d}",
                "target_word": spec["word"],
                "max_turns": MAX_TURNS,
                "history": history,
                "outcome": outcome,
            }
        )
    return games


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--output", default=str(Path(__file__).parents[1] / "data/demo_games.json"))
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()
    games = build(args.seed)
    Path(args.output).write_text(json.dumps(games, indent=1, ensure_ascii=False) + "\n")
    counts: dict[str, int] = {}
    for g in games:
        counts[g["outcome"]] = counts.get(g["outcome"], 0) + 1
    print(f"wrote {len(games)} games to {args.output}: {counts}")


if __name__ == "__main__":
    main()
